from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from tests.testapp import (
            handlers,  # noqa: F401
            kinds,  # noqa: F401  (operation kinds for tests/operations)
            pool_handlers,  # noqa: F401  (the process pool and time limits)
            workflows,  # noqa: F401  (workflow kinds for tests/operations/test_workflows*)
        )
