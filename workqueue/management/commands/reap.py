from workqueue.management.commands._sweep import SweepCommand


class Command(SweepCommand):
    help = (
        "Delete stopped items and terminal operations past retention, fail items past their queue's "
        "hard_timeout, prune stale pollers. One-shot and idempotent; run it from cron."
    )
    sweep = "reap"
