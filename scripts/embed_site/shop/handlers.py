from pathlib import Path

from django.conf import settings

from workqueue import handlers


@handlers.register("emails")
def send_email(item, ctx):
    ctx.progress()
    with open(Path(settings.BASE_DIR) / "sent.txt", "a") as f:
        f.write(item.key + "\n")
