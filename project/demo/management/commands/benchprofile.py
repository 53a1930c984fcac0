from pathlib import Path

from django.core.management.base import BaseCommand

from bench import profile


class Command(BaseCommand):
    help = (
        "Profile one runworker draining no-op items: py-spy (from .venv-peers) on the worker, wait events of "
        "its backends, pg_stat_statements where loaded. See docs/performance.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("--items", type=int, default=20_000)
        parser.add_argument("--batch", type=int, default=200)
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second (default 200).")
        parser.add_argument(
            "--out", default="bench-profile", help="Directory for worker.collapsed (default ./bench-profile)."
        )

    def handle(self, *args, **opts):
        from django.conf import settings

        settings.DEBUG = False
        text = profile.run(
            opts["items"],
            opts["batch"],
            opts["concurrency"],
            Path(opts["out"]),
            lambda m: self.stderr.write(m),
            rate=opts["rate"],
        )
        self.stdout.write(text)
