"""Print a named statement (or fragment) of the installed apps fully expanded; list them; write
the reviewed snapshots of every statement (``tests/sql_snapshots``)."""

import difflib
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from workqueue.sql import registry


class Command(BaseCommand):
    help = (
        "Print a statement of workqueue's or another app's .sql files (or a fragment) fully expanded, "
        "as the database receives it."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", nargs="?", help="A statement name (item_claim) or a fragment name (by_pkey).")
        parser.add_argument("--list", action="store_true", help="List the statements: name, app's file.")
        parser.add_argument("--fragments", action="store_true", help="With --list: list the fragments instead.")
        parser.add_argument(
            "--write-snapshots",
            metavar="DIR",
            type=Path,
            help="Write every statement, expanded, to DIR/<app>/<name>.sql and remove stale files there.",
        )

    def handle(self, *args, **opts):
        if opts["write_snapshots"]:
            written, changed, removed = registry.write_snapshots(opts["write_snapshots"])
            self.stdout.write(
                f"{written} statements in {opts['write_snapshots']}: {changed} changed, {removed} removed"
            )
        elif opts["list"]:
            for catalog in registry.catalogs():
                items = catalog.own_fragments() if opts["fragments"] else catalog.statements
                for name, item in items.items():
                    self.stdout.write(f"{name:<32} {item.source.partition(':')[0]}")
        elif opts["name"]:
            found = registry.find(opts["name"])
            if found is None:
                known = [n for c in registry.catalogs() for n in (*c.statements, *c.own_fragments())]
                close = difflib.get_close_matches(opts["name"], known, n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else "; `sqlshow --list` lists them"
                raise CommandError(f"no statement or fragment named {opts['name']!r}{hint}", returncode=2)
            self.stdout.write(registry.show(found[1]), ending="")
        else:
            raise CommandError("name a statement, or give --list or --write-snapshots DIR", returncode=2)
