from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "project.demo"
    label = "demo"
    verbose_name = "Demo"

    def ready(self):
        from project.demo import handlers, kinds  # noqa: F401  (registers demo queue handlers and kinds)
