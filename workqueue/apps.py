from django.apps import AppConfig


class WorkqueueConfig(AppConfig):
    name = "workqueue"
    verbose_name = "Work queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from workqueue import checks  # noqa: F401  (registers the system checks)
