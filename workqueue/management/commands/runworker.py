import argparse
import logging
from contextlib import contextmanager

from django.core.management.base import BaseCommand, CommandError

from workqueue import values
from workqueue.conf import wq_settings
from workqueue.management.commands._console import console_logging
from workqueue.schedules.loop import Scheduler
from workqueue.worker import WorkerOptions, run_worker
from workqueue.worker import metrics as worker_metrics

COUNT = values.argument(values.count)
SECONDS = values.argument(values.seconds)

log = logging.getLogger("workqueue.worker")


def port(text: str) -> int:
    """An argparse ``type=`` for a TCP port (1 to 65535)."""
    try:
        number = COUNT(text)
    except argparse.ArgumentTypeError:
        number = 0
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port from 1 to 65535 (e.g. 9100), not {text[:20]!r}")
    return number


@contextmanager
def metrics_server(port: int | None, address: str | None):
    """Serve the worker's own metrics (``workqueue.worker.metrics``) while the block runs, when
    a port is given (the option's, else WORKQUEUE["WORKER_METRICS_PORT"])."""
    conf = wq_settings()
    port = port if port is not None else conf.worker_metrics_port
    if port is None:
        yield None
        return
    address = address or conf.worker_metrics_address
    try:
        server = worker_metrics.serve(port, address)
    except worker_metrics.MetricsServerError as exc:
        raise CommandError(str(exc), returncode=2)
    log.info("worker metrics on http://%s:%d/metrics", address, port)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


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
        parser.add_argument(
            "--pool",
            choices=["threads", "processes"],
            help="Run sync handlers on threads (default) or in child processes (CPU-bound work); "
            "a queue's 'pool' setting or its handler's pool= picks per queue.",
        )
        parser.add_argument(
            "--processes", type=COUNT, help="Child processes of the process pool (default: the CPU count)."
        )
        parser.add_argument(
            "--max-tasks-per-child", type=COUNT, metavar="N", help="Replace a child process after N runs."
        )
        parser.add_argument(
            "--max-memory-mb",
            type=COUNT,
            metavar="MB",
            help="Replace a child process whose memory grew past MB, after its run (a handler's own wins).",
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
            "--metrics-port",
            type=port,
            metavar="PORT",
            help="Serve this worker's own Prometheus metrics on PORT (WORKQUEUE WORKER_METRICS_PORT; default off).",
        )
        parser.add_argument(
            "--metrics-address",
            metavar="ADDRESS",
            help="Address the metrics server listens on (WORKQUEUE WORKER_METRICS_ADDRESS, default 0.0.0.0).",
        )
        parser.add_argument(
            "--no-schedules",
            action="store_true",
            help="Do not run the scheduler loop (schedules are fired by the other workers or `schedules tick`).",
        )

    def handle(self, *args, **opts):
        try:
            with (
                console_logging(self, opts["verbosity"]),
                metrics_server(opts["metrics_port"], opts["metrics_address"]),
            ):
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
                            pool=opts["pool"],
                            processes=opts["processes"],
                            max_tasks_per_child=opts["max_tasks_per_child"],
                            max_memory_mb=opts["max_memory_mb"],
                        )
                    )
                finally:
                    if scheduler is not None:
                        scheduler.stop()
        except ValueError as exc:
            raise CommandError(str(exc), returncode=2)
        if code:
            raise SystemExit(code)
