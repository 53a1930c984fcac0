import random
import time

from django.core.management.base import BaseCommand
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections, connections

import operations
from project.demo import tasks
from project.demo.kinds import ExportRequest
from project.demo.management.commands.demo_setup import ENV_NAME
from workqueue.models import Environment, WorkItem

DB_ERRORS = (OperationalError, InterfaceError, DatabaseError)


class Command(BaseCommand):
    help = "Keep the demo dashboard moving: enqueue demo work and start demo operations every few seconds."

    def add_arguments(self, parser):
        parser.add_argument("--every", type=float, default=5.0, help="Seconds between rounds.")
        parser.add_argument("--rounds", type=int, default=0, help="Stop after N rounds (0 = run until stopped).")
        parser.add_argument("--owner", default="1", help="Owner of the demo operations (a user pk).")

    def handle(self, *args, **opts):
        n = 0
        backoff = 1.0
        while True:
            n += 1
            try:
                self.round(n, opts)
                backoff = 1.0
            except DB_ERRORS as exc:
                # A database restart: the demo carries on once it is back, as a site's code would.
                self.stderr.write(f"round {n}: database unavailable ({exc.__class__.__name__}); retrying")
                close_old_connections()
                for alias in connections:
                    connections[alias].close()
                time.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            if opts["rounds"] and n >= opts["rounds"]:
                return
            time.sleep(opts["every"])

    def round(self, n: int, opts: dict) -> None:
        """One round of demo work, as a site's views and signals would start it."""
        env = Environment.objects.filter(name=ENV_NAME).first()  # the one `make run` prints (and polls)
        stamp = f"{int(time.time())}-{n}"
        WorkItem.objects.enqueue_many(
            [{"queue": "demo.noop", "key": f"noop-{stamp}-{i}"} for i in range(random.randint(20, 80))]
        )
        for i in range(random.randint(1, 4)):
            WorkItem.objects.enqueue(
                "demo.sleep", f"sleep-{stamp}-{i}", metadata={"seconds": str(random.choice([1, 2, 4, 8]))}
            )
        if n % 3 == 1:
            WorkItem.objects.enqueue("demo.fail", f"fail-{stamp}")
        for i in range(2):  # 6 s of work per round on a queue capped at 2: it waits, but keeps up
            WorkItem.objects.enqueue("demo.capped", f"capped-{stamp}-{i}", metadata={"seconds": "3"})
        if env is not None:
            WorkItem.objects.enqueue("tool_exec", f"sess-{stamp}", environment=env, metadata={"tool": "bash"})
        export = operations.start(
            "demo.export",
            ExportRequest(
                units=random.randint(3, 8),
                records_per_unit=random.choice([500, 1000, 4300]),
                seconds_per_unit=random.choice([1.0, 2.0]),
            ),
            owner=opts["owner"],
        )
        if n % 4 == 0:
            operations.cancel(export.id)  # a cancel to watch: pending now, or between units
        if n % 3 == 1:
            operations.start("demo.flaky", {"failures": 2}, owner=opts["owner"])
        if n % 5 == 2:
            operations.start("demo.doomed", {"subject": f"user-{n}"}, owner=opts["owner"])
        if n % 6 == 1:
            # Fan-out and fan-in: four exports, then one bundle once all four have ended.
            exports = [ExportRequest(units=random.randint(2, 5), seconds_per_unit=1.0) for _ in range(4)]
            batch = operations.batch("demo.export", exports, then=("demo.bundle", {"round": n}), owner=opts["owner"])
            self.stdout.write(f"round {n}: started batch {batch.id}")
        if n % 6 == 4:
            chain = operations.chain(
                [
                    ("demo.step", {"name": name, "add": add})
                    for name, add in (("fetch", 1), ("resize", 10), ("publish", 100))
                ],
                owner=opts["owner"],
            )
            self.stdout.write(f"round {n}: started chain {chain.id}")
        # Django's own task API, run by the same queue (TASKS points at our backend).
        tasks.add.enqueue(n, n)
        if n % 2 == 1:
            tasks.send_welcome.enqueue(n)
            tasks.crunch.enqueue(rows=random.choice([300, 800]))
        self.stdout.write(f"round {n}: enqueued demo work, started {export.id}")
