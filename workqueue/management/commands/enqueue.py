import json

from django.core.management.base import BaseCommand, CommandError

from workqueue import values
from workqueue.environments import find_environment
from workqueue.exceptions import InvalidInput
from workqueue.models import WorkItem

#: The most items one `enqueue --count` writes (one statement).
MAX_COUNT = 100_000


def _metadata(pairs):
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--metadata takes key=value, not {pair!r}")
        out[key] = value
    return out


class Command(BaseCommand):
    help = "Enqueue work: one item for (QUEUE, KEY), or --count N items keyed KEY-1 … KEY-N in one statement."

    def add_arguments(self, parser):
        parser.add_argument("queue")
        parser.add_argument("key")
        parser.add_argument("--environment", help="Environment id or name.")
        parser.add_argument("--priority", type=values.argument(values.priority, text=True))
        parser.add_argument(
            "--delay",
            type=values.argument(values.seconds, allow_zero=True),
            metavar="SECONDS",
            help="Hold it back: seconds, or 10s, 5m, 2h, 1d (at most ten years).",
        )
        parser.add_argument("--metadata", action="append", metavar="KEY=VALUE")
        parser.add_argument("--group", help="The item's group (e.g. a tenant), for per-group limits.")
        parser.add_argument(
            "--count",
            type=values.argument(values.count, maximum=MAX_COUNT),
            help=f"Enqueue N items keyed KEY-1 … KEY-N (1 to {MAX_COUNT:,}).",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):
        try:
            env = find_environment(opts["environment"]) if opts["environment"] else None
            meta = _metadata(opts["metadata"])
            if opts["count"] is not None:
                rows = WorkItem.objects.enqueue_many(
                    [
                        {"queue": opts["queue"], "key": f"{opts['key']}-{n}", "metadata": meta}
                        for n in range(1, opts["count"] + 1)
                    ],
                    environment=env,
                    priority=opts["priority"],
                    delay=opts["delay"],
                    group=opts["group"],
                )
                created = sum(1 for r in rows if r[3])
                if opts["json"]:
                    self.stdout.write(json.dumps({"enqueued": len(rows), "created": created}))
                else:
                    self.stdout.write(f"enqueued {len(rows)} items on {opts['queue']} ({created} new)")
                return
            item, created = WorkItem.objects.enqueue(
                opts["queue"],
                opts["key"],
                environment=env,
                priority=opts["priority"],
                delay=opts["delay"],
                metadata=meta,
                group=opts["group"],
            )
        except InvalidInput as exc:
            raise CommandError(str(exc), returncode=2)
        if opts["json"]:
            self.stdout.write(json.dumps({"id": item.public_id, "created": created, "state": item.state}))
        else:
            self.stdout.write(item.public_id)
