import json

from django.core.management.base import BaseCommand, CommandError

from bench.runner import SECTIONS, Options, run


class Command(BaseCommand):
    help = (
        "Measure the queue against a throwaway database: enqueue rates, drain with 1 and 2 runworker "
        "processes, wake-up latency, operations and @task life, the wire API cycle, worker RSS — each "
        "beside a raw-SQL ceiling; and the drain on a table that holds a site's history. See docs/performance.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("--quick", action="store_true", help="Small numbers, one run (the test suite uses it).")
        parser.add_argument("--json", metavar="PATH", help="Also write the results as JSON to PATH.")
        parser.add_argument("--runs", type=int, help="Runs per figure; the median is reported (default 3).")
        parser.add_argument("--workers", help="Comma-separated runworker process counts for the drain (default 1,2).")
        parser.add_argument("--batch", type=int, help="runworker --batch (default 200).")
        parser.add_argument("--concurrency", type=int, help="runworker --concurrency (default 4).")
        parser.add_argument("--items", type=int, help="Items per drain run (default 50,000).")
        parser.add_argument("--rss-items", type=int, help="Items drained for the RSS figure (default 200,000).")
        parser.add_argument(
            "--history-stopped",
            type=int,
            metavar="N",
            help="history section: stopped rows loaded into the big table (default 1,000,000).",
        )
        parser.add_argument(
            "--history-scheduled",
            type=int,
            metavar="M",
            help="history section: rows scheduled a day ahead loaded into the big table (default 100,000).",
        )
        parser.add_argument(
            "--admin-rows",
            type=int,
            metavar="N",
            help="admin section (--only admin): settled work items loaded (default 10,000,000).",
        )
        parser.add_argument(
            "--admin-operations",
            type=int,
            metavar="M",
            help="admin section: finished operations loaded (default 1,000,000).",
        )
        parser.add_argument(
            "--only", help=f"Comma-separated sections to run, from: {', '.join(SECTIONS)} (default: all)."
        )

    def options(self, opts: dict) -> Options:
        """The run's Options from the command line (CommandError, exit 2, for a bad value)."""
        options = Options.quick_mode() if opts["quick"] else Options()
        options.log = lambda msg: self.stderr.write(msg)
        if opts["workers"]:
            try:
                options.workers = tuple(int(w) for w in opts["workers"].split(",") if w)
            except ValueError:
                raise CommandError("--workers takes numbers like 1,2", returncode=2)
        named = {"runs": "runs", "batch": "batch", "concurrency": "concurrency", "items": "drain_items"}
        for key, attr in {**named, "rss_items": "rss_items"}.items():
            if opts[key]:
                setattr(options, attr, opts[key])
        for key in ("history_stopped", "history_scheduled", "admin_rows", "admin_operations"):
            if opts[key] is not None:
                if opts[key] < 0:
                    raise CommandError(f"--{key.replace('_', '-')} takes a count of rows, 0 or more", returncode=2)
                setattr(options, key, opts[key])
        if opts["only"]:
            options.sections = self.sections(opts["only"])
        return options

    def sections(self, only: str) -> tuple[str, ...]:
        chosen = tuple(s.strip() for s in only.split(",") if s.strip())
        unknown = [s for s in chosen if s not in SECTIONS]
        if unknown:
            raise CommandError(
                f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}", returncode=2
            )
        return chosen

    def handle(self, *args, **opts):
        options = self.options(opts)
        report = run(options)
        self.stdout.write(report.table())
        if opts["json"]:
            with open(opts["json"], "w") as out:
                json.dump(report.as_dict(), out, indent=2)
