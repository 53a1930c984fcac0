"""Shared body of the `recover` and `reap` commands."""

import json

from django.core.management.base import BaseCommand, CommandError

from workqueue.management.commands._console import console_logging
from workqueue.sweeps import run_sweep


class SweepCommand(BaseCommand):
    sweep = ""

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="Print the summary as one JSON object.")
        parser.add_argument("--dry-run", action="store_true", help="Count what would change; change nothing.")

    def handle(self, *args, **opts):
        try:
            with console_logging(self, opts["verbosity"]):
                result = run_sweep(self.sweep, dry_run=opts["dry_run"])
        except Exception as exc:
            raise CommandError(f"{self.sweep} failed: {exc.__class__.__name__}: {exc}")
        if opts["json"]:
            self.stdout.write(json.dumps(result.as_dict(), sort_keys=True))
        else:
            self.stdout.write(result.summary())
