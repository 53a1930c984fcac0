import json

from django.core.management.base import BaseCommand, CommandError

from workqueue import controls
from workqueue.exceptions import InvalidInput


class Command(BaseCommand):
    help = (
        "Flow control at runtime: list queues with their effective limits, pause or resume one, "
        "or override its limits (fleet-wide, within about a second; --clear returns a field to the setting)."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        ls = sub.add_parser("list", help="Every known queue: paused, limits (and which are overrides), depth.")
        ls.add_argument("--json", action="store_true")
        sub.add_parser("pause", help="Stop handing out the queue's items (enqueue still works).").add_argument("queue")
        sub.add_parser("resume", help="Let a paused queue's items flow again.").add_argument("queue")
        st = sub.add_parser("set", help="Override limits; a field not given keeps its value.")
        st.add_argument("queue")
        st.add_argument("--max-running", metavar="N", help="Items of the queue held at once, fleet-wide.")
        st.add_argument("--max-running-per-group", metavar="N", help="Items of one group held at once.")
        st.add_argument("--rate", metavar="N/PERIOD", help="Starts per period: 50/s, 600/m, 10000/h.")
        st.add_argument("--rate-per-group", metavar="N/PERIOD", help="Starts per period for one group.")
        st.add_argument(
            "--clear",
            action="append",
            default=[],
            metavar="FIELD",
            help=f"Drop an override, back to the setting ({', '.join(controls.FIELDS)}; repeatable).",
        )
        st.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):
        action = opts["action"]
        try:
            if action == "list":
                return self._list(opts["json"])
            if action == "pause":
                control = controls.pause(opts["queue"], by="manage.py queues")
            elif action == "resume":
                control = controls.resume(opts["queue"], by="manage.py queues")
            else:
                limits = {f: opts[f] for f in controls.FIELDS if opts.get(f) is not None}
                clear = [f.replace("-", "_") for f in opts["clear"]]
                control = controls.write(opts["queue"], limits=limits, clear=clear, by="manage.py queues")
        except InvalidInput as exc:
            raise CommandError(str(exc), returncode=2)
        row = controls.describe(control.queue)
        if opts.get("json"):
            self.stdout.write(json.dumps(row))
        else:
            self.stdout.write(f"{control.queue}: {self._line(row)}")

    def _line(self, row: dict) -> str:
        parts = ["paused" if row["paused"] else "running"]
        for f in controls.FIELDS:
            value = row[f]["value"]
            if value is not None:
                parts.append(f"{f}={value}" + (" (override)" if row[f]["source"] == "override" else ""))
        return ", ".join(parts)

    def _list(self, as_json: bool) -> None:
        rows = controls.describe_all()
        if as_json:
            self.stdout.write(json.dumps({"queues": rows}))
            return
        if not rows:
            self.stdout.write("no queues")
            return
        width = max(len(r["name"]) for r in rows)
        for r in rows:
            self.stdout.write(f"{r['name']:<{width}}  depth {r['depth']:>7}  {self._line(r)}")
