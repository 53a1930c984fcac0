"""A tiny app for the runworker subprocess of test_lanes: a handler for the test.wire queue.

Only ``tests.workqueue.wire.worker_settings`` installs it, so runworker can be pointed at test.wire and
show that it never claims the items Poll serves.
"""

from django.apps import AppConfig


class WireTestConfig(AppConfig):
    name = "tests.workqueue.wire"
    label = "wiretests"

    def ready(self):
        from django.db import transaction

        from tests.testapp.models import Completion
        from workqueue import handlers

        def record(item, ctx):
            with transaction.atomic():
                Completion.objects.create(
                    queue=item.queue,
                    key=item.key,
                    worker_id=ctx.worker_id,
                    attempt=ctx.attempt,
                    reclaimed=ctx.reclaimed,
                )
                ctx.complete()

        handlers.register("test.wire", record)
