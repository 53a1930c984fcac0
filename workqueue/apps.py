from django.apps import AppConfig
from django.db.models.signals import post_migrate


class WorkqueueConfig(AppConfig):
    name = "workqueue"
    verbose_name = "Work queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from workqueue import checks  # noqa: F401  (registers the system checks)

        post_migrate.connect(_sync_schedules, sender=self, dispatch_uid="workqueue.sync_schedules")


def _sync_schedules(sender, using="default", plan=None, **kwargs):
    """After ``migrate``: bring work_schedules in line with WORKQUEUE["SCHEDULES"]."""
    import logging

    from workqueue import schedules
    from workqueue.exceptions import InvalidSchedule, WorkqueueSettingsError

    try:
        schedules.sync_settings(using=using)
    except (InvalidSchedule, WorkqueueSettingsError) as exc:
        # `manage.py check` (run by migrate itself) names the bad schedule; nothing was written.
        logging.getLogger("workqueue.schedules").error("schedules not synced: %s", exc)
