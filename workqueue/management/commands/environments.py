import json

from django.core.management.base import BaseCommand, CommandError

from workqueue.environments import create_environment, find_environment, rotate_environment_key
from workqueue.exceptions import InvalidInput
from workqueue.models import Environment


class Command(BaseCommand):
    help = "Create, list and rotate the keys of environments (where work runs)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create an environment and print its key once.")
        create.add_argument("name")
        create.add_argument("--kind", required=True, choices=Environment.Kind.values)
        create.add_argument("--json", action="store_true")
        rotate = sub.add_parser("rotate-key", help="Replace an environment's key and print the new one once.")
        rotate.add_argument("environment", help="Environment id or name.")
        rotate.add_argument("--json", action="store_true")
        listing = sub.add_parser("list", help="List environments.")
        listing.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):
        try:
            getattr(self, "do_" + opts["action"].replace("-", "_"))(opts)
        except InvalidInput as exc:
            raise CommandError(str(exc), returncode=2)

    def _emit(self, opts, data: dict, text: str) -> None:
        self.stdout.write(json.dumps(data, sort_keys=True) if opts["json"] else text)

    def do_create(self, opts):
        env, key = create_environment(opts["name"], opts["kind"])
        self._emit(
            opts,
            {"id": env.id, "name": env.name, "kind": env.kind, "key": key},
            f"created environment {env.id} ({env.name}, {env.kind})\nkey: {key}\n"
            "(the key is shown only now; store it where the worker can read it)",
        )

    def do_rotate_key(self, opts):
        env = find_environment(opts["environment"])
        key = rotate_environment_key(env)
        self._emit(
            opts,
            {"id": env.id, "name": env.name, "key": key},
            f"new key for {env.id} ({env.name}): {key}\n(the old key no longer works; this one is shown only now)",
        )

    def do_list(self, opts):
        envs = list(Environment.objects.all())
        if opts["json"]:
            rows = [{"id": e.id, "name": e.name, "kind": e.kind, "key_hint": e.key_hint + "…"} for e in envs]
            self.stdout.write(json.dumps(rows))
            return
        for e in envs:
            self.stdout.write(f"{e.id}  {e.kind:<11}  {e.name}  (key {e.key_hint}…)")
