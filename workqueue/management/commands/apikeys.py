import json

from django.core.management.base import BaseCommand, CommandError

from workqueue.environments import create_api_key
from workqueue.exceptions import InvalidInput
from workqueue.models import ApiKey


class Command(BaseCommand):
    help = "Create, list or revoke control-plane API keys for the HTTP pull API."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create an API key and print it once.")
        create.add_argument("name")
        create.add_argument(
            "--environment",
            action="append",
            default=[],
            metavar="ENV",
            help="Limit the key to this environment (id or name; repeatable). Without it the key is site-wide.",
        )
        create.add_argument("--json", action="store_true")
        revoke = sub.add_parser("revoke", help="Revoke an API key by name.")
        revoke.add_argument("name")
        sub.add_parser("list", help="List API keys.")

    def handle(self, *args, **opts):
        action = opts["action"]
        try:
            if action == "create":
                obj, key = create_api_key(opts["name"], environments=opts["environment"])
                if opts["json"]:
                    self.stdout.write(json.dumps({"name": obj.name, "key": key}))
                else:
                    self.stdout.write(f"created API key {obj.name!r}: {key}\n(the key is shown only now)")
            elif action == "revoke":
                if not ApiKey.objects.filter(name=opts["name"]).update(revoked=True):
                    raise InvalidInput(f"no API key named {opts['name']!r}")
                self.stdout.write(f"revoked {opts['name']!r}")
            else:
                for k in ApiKey.objects.order_by("name").prefetch_related("environments"):
                    self.stdout.write(f"{k.name}  {k.key_hint}…  {'revoked' if k.revoked else 'active'}  {k.scope()}")
        except InvalidInput as exc:
            raise CommandError(str(exc), returncode=2)
