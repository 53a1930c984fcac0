import json
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from workqueue.environments import create_environment, rotate_environment_key
from workqueue.models import Environment

ENV_NAME = "demo-self-hosted"


class Command(BaseCommand):
    help = "Create (or reset) the demo superuser and the demo self-hosted environment; print their secrets once."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):
        User = get_user_model()
        password = secrets.token_urlsafe(12)
        user, _created = User.objects.get_or_create(
            username=opts["username"], defaults={"is_staff": True, "is_superuser": True}
        )
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        env = Environment.objects.filter(name=ENV_NAME).first()
        if env is None:
            env, key = create_environment(ENV_NAME, Environment.Kind.SELF_HOSTED)
        else:
            key = rotate_environment_key(env)
        data = {"username": user.username, "password": password, "environment_id": env.id, "environment_key": key}
        if opts["json"]:
            self.stdout.write(json.dumps(data))
        else:
            self.stdout.write(
                f"admin user {user.username!r} password {password}\nself-hosted environment {env.id} key {key}"
            )
