from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Operations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from operations import (
            checks,  # noqa: F401  (registers the system checks)
            runner,
            store,
            sweeps,
        )
        from operations.conf import ops_settings
        from operations.exceptions import OperationsSettingsError
        from workqueue import handlers, hooks, sql
        from workqueue.conf import declare_queue, declare_queue_family

        sql.register(store.QUERIES)  # for `manage.py sqlshow` and the SQL snapshots

        try:
            conf = ops_settings()
        except OperationsSettingsError:
            return  # operations.E001 names the bad value; nothing to wire up until it is fixed
        for queue in conf.queues:
            # The operations defaults for their own queues; a site's WORKQUEUE entry still wins.
            declare_queue(queue, lease=conf.lease, retry_delay=conf.retry_delay, max_attempts=conf.max_attempts)
            handlers.register(queue, runner.handle, renews_lease=True)
        for prefix in conf.task_families:  # a task backend with QUEUES []: any queue name
            declare_queue_family(prefix, lease=conf.lease, retry_delay=conf.retry_delay, max_attempts=conf.max_attempts)
            handlers.register_family(prefix, runner.handle, renews_lease=True)
        try:
            from operations.tasks import backend as task_backend
        except ImportError:  # neither django.tasks (Django 6) nor the django-tasks backport
            pass
        else:
            from operations.registry import registry

            registry.add_resolver(task_backend.KIND_PREFIX, task_backend.resolve)
        from operations import schedules

        hooks.register_schedule_target("operation", schedules.fire_operation, schedules.check_operation)
        hooks.register_schedule_target("task", schedules.fire_task, schedules.check_task)
        hooks.on_items_moved(
            sweeps.on_items_moved,
            queues=lambda: ops_settings().queues,
            prefixes=lambda: ops_settings().task_families,
        )
        hooks.register_sweep("recover", "operations", sweeps.recover_sweep)
        hooks.register_sweep("reap", "operations", sweeps.reap_sweep)
