"""A small self-hosted worker for the demo: the official Anthropic SDK's ``iter_work`` against
the demo's own wire API, so the demo environment's ``tool_exec`` items are taken and finished
instead of piling up (and showing as stuck) while nothing polls."""

import random
import time

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Poll the demo's self-hosted environment with the official SDK and run its items (a fake tool call each)."

    def add_arguments(self, parser):
        parser.add_argument("--base-url", required=True, help="The demo site, e.g. http://127.0.0.1:8000")
        parser.add_argument("--environment", required=True, help="The environment id (env_…).")
        parser.add_argument("--key", required=True, help="The environment key (wqenv_…).")
        parser.add_argument("--worker-id", default="demo-poller")
        parser.add_argument("--seconds", type=float, default=1.0, help="Longest fake tool call, in seconds.")

    def handle(self, *args, **opts):
        try:
            import anthropic
            from anthropic.lib.environments import iter_work
        except ImportError as exc:  # a dev dependency: `make run` installs it
            raise CommandError("demo_poller needs the anthropic SDK: pip install -r requirements/dev.txt") from exc
        client = anthropic.Anthropic(base_url=opts["base_url"], auth_token=opts["key"], max_retries=2)
        work = client.beta.environments.work
        backoff = 1.0
        while True:
            try:
                for item in iter_work(work, environment_id=opts["environment"], worker_id=opts["worker_id"]):
                    time.sleep(random.uniform(0.1, opts["seconds"]))  # the "tool call"
                    self.stdout.write(f"ran {item.data.id} ({item.metadata.get('tool', '?')})")
                    backoff = 1.0
            except anthropic.APIError as exc:
                # The site restarting, or its database away: a worker rides it out and polls again.
                self.stderr.write(f"poll failed ({exc.__class__.__name__}); retrying in {backoff:.0f}s")
                time.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
