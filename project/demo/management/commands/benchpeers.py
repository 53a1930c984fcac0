import json

from django.core.management.base import BaseCommand, CommandError

from bench.peers import PEERS, PeerOptions, run


def _numbers(value: str, flag: str) -> tuple[int, ...]:
    try:
        numbers = tuple(int(v) for v in value.split(",") if v)
    except ValueError:
        raise CommandError(f"{flag} takes numbers like 1,2", returncode=2)
    if not numbers or min(numbers) < 1:
        raise CommandError(f"{flag} takes positive numbers like 1,2", returncode=2)
    return numbers


class Command(BaseCommand):
    help = (
        "Drain the same no-op jobs with runworker, PgQueuer and Procrastinate (pinned, in .venv-peers) on "
        "this database server, in one run; print rate and CPU per item for each. See docs/performance.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("--items", type=int, help="Jobs per drain (default 50,000).")
        parser.add_argument("--workers", help="Comma-separated worker process counts (default 1,2).")
        parser.add_argument("--runs", type=int, help="Runs per figure; the median rate is reported (default 1).")
        parser.add_argument("--batch", type=int, help="runworker --batch (default 200).")
        parser.add_argument("--concurrency", type=int, help="runworker --concurrency and Procrastinate's (default 4).")
        parser.add_argument("--pgqueuer-batches", help="PgQueuer batch sizes to try (default 10,50,200).")
        parser.add_argument("--time-limit", type=float, help="Seconds a drain may take before it is cut (default 180).")
        parser.add_argument("--systems", help=f"Comma-separated, from: workqueue, {', '.join(PEERS)} (default: all).")
        parser.add_argument("--json", metavar="PATH", help="Also write the results as JSON to PATH.")

    def handle(self, *args, **opts):
        options = PeerOptions(log=lambda msg: self.stderr.write(msg))
        if opts["items"]:
            options.items = opts["items"]
        if opts["workers"]:
            options.workers = _numbers(opts["workers"], "--workers")
        if opts["pgqueuer_batches"]:
            options.pgqueuer_batches = _numbers(opts["pgqueuer_batches"], "--pgqueuer-batches")
        for key in ("runs", "batch", "concurrency", "time_limit"):
            if opts[key]:
                setattr(options, key, opts[key])
        if opts["systems"]:
            chosen = tuple(s.strip() for s in opts["systems"].split(",") if s.strip())
            known = ("workqueue", *PEERS)
            unknown = [s for s in chosen if s not in known]
            if unknown:
                raise CommandError(
                    f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(known)}", returncode=2
                )
            options.systems = chosen
        report = run(options)
        self.stdout.write(report.table())
        if opts["json"]:
            with open(opts["json"], "w") as out:
                json.dump(report.as_dict(), out, indent=2)
