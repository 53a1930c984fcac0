from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "shop"

    def ready(self):
        from . import handlers, kinds  # noqa: F401  (registers the queue handler and the operation kind)
