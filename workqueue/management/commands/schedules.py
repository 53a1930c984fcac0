import json

from django.core.management.base import BaseCommand, CommandError

from workqueue import schedules, values
from workqueue.exceptions import InvalidInput, ScheduleNotFound
from workqueue.management.commands.enqueue import _metadata


def _json_arg(text, what):
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"{what} must be JSON ({exc})")


def _row(s) -> dict:
    return {
        "name": s.name,
        "runs": describe_target(s),
        "when": schedules.timing_of(s).describe(),
        "misfire": s.misfire,
        "enabled": s.enabled,
        "source": s.source,
        "removed": s.removed_at is not None,
        "next_slot": s.next_slot.isoformat() if s.next_slot else None,
        "last_slot": s.last_slot.isoformat() if s.last_slot else None,
        "last_key": s.last_key,
        "fired": s.fired,
        "last_error": s.last_error,
    }


def describe_target(s) -> str:
    if s.target == "item":
        return f"item on {s.queue}"
    if s.target == "operation":
        return f"operation {s.kind}"
    return f"task {s.task}"


class Command(BaseCommand):
    help = "List, add, pause, resume, remove and run schedules; `tick` fires what is due once (for cron)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        ls = sub.add_parser("list", help="Show every schedule.")
        ls.add_argument("--json", action="store_true")
        add = sub.add_parser("add", help="Create a schedule.")
        add.add_argument("name")
        when = add.add_mutually_exclusive_group(required=True)
        when.add_argument("--cron", metavar="EXPR", help="Five-field cron expression, e.g. '30 2 * * *'.")
        when.add_argument("--every", metavar="DURATION", help="Interval: 10, 10s, 5m, 2h, 1d.")
        what = add.add_mutually_exclusive_group(required=True)
        what.add_argument("--queue", help="Enqueue a work item on this queue.")
        what.add_argument("--operation", metavar="KIND", help="Start an operation of this kind.")
        what.add_argument("--task", metavar="DOTTED.PATH", help="Enqueue this django.tasks task.")
        add.add_argument("--key", default="", help="Work item: a prefix for the key {name}:{slot}.")
        add.add_argument("--metadata", action="append", metavar="KEY=VALUE")
        add.add_argument("--priority", type=values.argument(values.priority, text=True), default=0)
        add.add_argument("--request", metavar="JSON", help="Operation: its request.")
        add.add_argument(
            "--args", dest="task_args", metavar="JSON", help="Task: its positional arguments (a JSON list)."
        )
        add.add_argument("--timezone", metavar="TZ", help="IANA time zone of the cron expression.")
        add.add_argument("--misfire", choices=["latest", "all", "skip"], default="latest")
        add.add_argument("--paused", action="store_true", help="Create it paused.")
        for verb, text in (
            ("pause", "Stop a schedule firing."),
            ("resume", "Let a paused schedule fire again, from its next slot."),
            ("remove", "Delete an operator's schedule."),
            ("run-now", "Enqueue one extra run now (keyed manual; no slot is used)."),
        ):
            sub.add_parser(verb, help=text).add_argument("name")
        tick = sub.add_parser("tick", help="Sync the settings and fire every due schedule once.")
        tick.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):
        try:
            getattr(self, "do_" + opts["action"].replace("-", "_"))(opts)
        except (InvalidInput, ScheduleNotFound) as exc:
            raise CommandError(str(exc), returncode=2)

    def do_list(self, opts):
        from workqueue.models import Schedule

        rows = [_row(s) for s in Schedule.objects.all()]
        if opts["json"]:
            self.stdout.write(json.dumps(rows))
            return
        if not rows:
            self.stdout.write("no schedules")
        for r in rows:
            state = "removed" if r["removed"] else ("enabled" if r["enabled"] else "paused")
            self.stdout.write(
                f"{r['name']}: {r['runs']}, {r['when']}, {state}, next {r['next_slot'] or '-'}, "
                f"fired {r['fired']} ({r['source']})"
            )

    def do_add(self, opts):
        fields = {
            "name": opts["name"],
            "cron": opts["cron"] or "",
            "every": opts["every"],  # text: schedules.validate parses it (workqueue.values.seconds)
            "queue": opts["queue"] or "",
            "key_prefix": opts["key"],
            "metadata": _metadata(opts["metadata"]),
            "priority": opts["priority"],
            "kind": opts["operation"] or "",
            "request": _json_arg(opts["request"], "--request"),
            "task": opts["task"] or "",
            "args": _json_arg(opts["task_args"], "--args") or [],
            "timezone": opts["timezone"],
            "misfire": opts["misfire"],
            "enabled": not opts["paused"],
        }
        s = schedules.add(fields)
        self.stdout.write(f"added {s.name}: next run {s.next_slot.isoformat()}")

    def do_pause(self, opts):
        schedules.get(opts["name"])
        schedules.pause([opts["name"]])
        self.stdout.write(f"paused {opts['name']}")

    def do_resume(self, opts):
        schedules.get(opts["name"])
        schedules.resume([opts["name"]])
        self.stdout.write(f"resumed {opts['name']}")

    def do_remove(self, opts):
        schedules.remove(opts["name"])
        self.stdout.write(f"removed {opts['name']}")

    def do_run_now(self, opts):
        fired = schedules.run_now(opts["name"])
        self.stdout.write(f"enqueued {fired.queue} {fired.key}")

    def do_tick(self, opts):
        synced = schedules.sync_settings()
        result = schedules.fire_due()
        if opts["json"]:
            self.stdout.write(json.dumps({**result.as_dict(), "synced": {k: len(v) for k, v in vars(synced).items()}}))
        else:
            self.stdout.write(
                f"tick: {len(result.fired)} run(s) fired from {result.schedules} due schedule(s)"
                + (f", {len(result.errors)} error(s)" if result.errors else "")
            )
