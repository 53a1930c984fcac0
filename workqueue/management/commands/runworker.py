from django.core.management.base import BaseCommand, CommandError

from workqueue import values
from workqueue.management.commands._console import console_logging
from workqueue.schedules.loop import Scheduler
from workqueue.worker import WorkerOptions, run_worker

COUNT = values.argument(values.count)
SECONDS = values.argument(values.seconds)


class Command(BaseCommand):
    help = "Run the claim loop: take work items from the queues and run their handlers."

    def add_arguments(self, parser):
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="QUEUE",
            help="Queue to serve (repeatable); 'tasks.*' serves a queue family. "
            "Default: every queue and queue family with a registered handler.",
        )
        parser.add_argument("--concurrency", type=COUNT, help="Threads running items (WORKQUEUE CONCURRENCY).")
        parser.add_argument(
            "--async-concurrency",
            type=COUNT,
            help="async def handlers run at once on the event loop (WORKQUEUE ASYNC_CONCURRENCY, default 100).",
        )
        parser.add_argument("--batch", type=COUNT, help="Items one claim takes (WORKQUEUE BATCH).")
        parser.add_argument("--poll", type=SECONDS, help="Backstop seconds between claims when idle.")
        parser.add_argument("--max-items", type=COUNT, help="Exit 0 after this many items.")
        parser.add_argument("--max-seconds", type=SECONDS, help="Exit 0 after this many seconds.")
        parser.add_argument("--worker-id", help="Name shown in the admin (default host:pid:random).")
        parser.add_argument(
            "--grace",
            type=values.argument(values.seconds, allow_zero=True),
            help="Seconds running items get after SIGTERM.",
        )
        parser.add_argument(
            "--maintenance",
            type=SECONDS,
            metavar="SECONDS",
            help="Also run recover and reap every SECONDS (for sites without cron).",
        )

        parser.add_argument(
            "--no-schedules",
            action="store_true",
            help="Do not run the scheduler loop (schedules are fired by the other workers or `schedules tick`).",
        )

    def handle(self, *args, **opts):
        try:
            with console_logging(self, opts["verbosity"]):
                # Schedules: a separate loop on its own thread and connection (workqueue.schedules.loop).
                scheduler = None if opts["no_schedules"] else Scheduler(poll=opts["poll"]).start()
                try:
                    code = run_worker(
                        WorkerOptions(
                            queues=opts["queues"] or [],
                            concurrency=opts["concurrency"],
                            async_concurrency=opts["async_concurrency"],
                            batch=opts["batch"],
                            poll=opts["poll"],
                            max_items=opts["max_items"],
                            max_seconds=opts["max_seconds"],
                            worker_id=opts["worker_id"],
                            grace=opts["grace"],
                            maintenance=opts["maintenance"],
                        )
                    )
                finally:
                    if scheduler is not None:
                        scheduler.stop()
        except ValueError as exc:
            raise CommandError(str(exc), returncode=2)
        if code:
            raise SystemExit(code)
