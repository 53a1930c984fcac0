from django.db import models


class Completion(models.Model):
    """One run of a test handler that reached its end: lets tests count runs per item."""

    queue = models.CharField(max_length=128)
    key = models.CharField(max_length=512)
    worker_id = models.CharField(max_length=200)
    attempt = models.IntegerField()
    reclaimed = models.BooleanField(default=False)
    at = models.DateTimeField(auto_now_add=True)


class Sample(models.Model):
    """A value a test handler observed (e.g. how many items of a capped queue were held)."""

    name = models.CharField(max_length=64)
    value = models.IntegerField()
    at = models.DateTimeField(auto_now_add=True)


class OperationRun(models.Model):
    """What an operation's run saw, written from inside the run (tests/testapp/kinds.py).

    ``event`` is ``began`` when the run starts and ``returned`` just before it returns
    normally; ``attempt`` and ``final`` are the run's ``reporter.attempt``; ``pid`` is the
    process that ran it.
    """

    op_id = models.CharField(max_length=200)
    kind = models.CharField(max_length=128)
    event = models.CharField(max_length=16)
    attempt = models.IntegerField()
    final = models.BooleanField()
    pid = models.IntegerField()
    at = models.DateTimeField(auto_now_add=True)
