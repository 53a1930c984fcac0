from workqueue.management.commands._sweep import SweepCommand


class Command(SweepCommand):
    help = (
        "Put back what crashes left half-done: finalize abandoned stopping items, re-offer lapsed "
        "wire items, re-offer stranded operations. One-shot and idempotent; run it from cron every minute."
    )
    sweep = "recover"
