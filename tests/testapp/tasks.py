"""Tasks for the django.tasks backend tests, written the way Django's documentation writes them."""

import time

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, task


@task
def add(a, b):
    return a + b


@task(priority=10, queue_name="emails")
def send_email(to, subject="hello"):
    return {"to": to, "subject": subject}


@task(takes_context=True)
def with_context(context, rows):
    reporter = context.reporter
    reporter.set_units(2)
    for n in range(2):
        reporter.start_unit(f"half {n}")
        reporter.advance(rows // 2)
        reporter.finish_unit()
    return {"attempt": context.attempt, "result_id": context.task_result.id}


@task
def explode(message):
    raise ValueError(message)


@task(max_attempts=2, retry_delay=0)
def explode_twice(message):
    raise KeyError(message)


@task(takes_context=True)
def hang_first_attempt(context, seconds):
    # The first attempt hangs (its worker is SIGKILLed by the test); a retry returns at once.
    if context.attempt == 1:
        time.sleep(seconds)
    return {"attempt": context.attempt}


@task
async def async_add(a, b):
    return a + b


@task
def big_return():
    return "x" * 20_000  # over the 16 KiB a result may hold


@task(takes_context=True)
def until_cancelled(context, seconds=60):
    # Reports progress (so each flush can bring a cancellation back) until asked to stop.
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if context.is_cancelled():
            return "stopped"
        context.reporter.advance(1)
        time.sleep(0.05)
    return "ran out"


# -- endings Django's own task tests exercise (tests/test_django_contract.py and test_backend.py) --


@task
def noop(*args, **kwargs):
    return None


@task
async def noop_async(*args, **kwargs):
    return None


@task
def meaning_of_life():
    return 42


@task(max_attempts=1)
def fail_value_error():
    raise ValueError("This task failed due to ValueError")


@task(max_attempts=1)
def fail_system_exit():
    raise SystemExit("This task failed due to SystemExit")


@task(max_attempts=1)
def call_exit():
    exit(1)


@task(max_attempts=1)
def interrupt():
    raise KeyboardInterrupt("This task failed due to KeyboardInterrupt")


@task(max_attempts=1)
def complex_exception():
    raise ValueError(ValueError("This task failed"))


@task
def complex_return_value():
    return {"value": object()}  # not JSON: nothing can store it


@task(takes_context=True)
def task_id_and_backend(context):
    return {
        "id": context.task_result.id,
        "backend": context.task_result.backend,
        "task_backend": context.task_result.task.backend,
        "queue_name": context.task_result.task.queue_name,
        "priority": context.task_result.task.priority,
    }


@task(takes_context=True)
def check_context(context, attempt):
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt
    assert context.task_result.status == "RUNNING"


@task(takes_context=True)
def get_task_id(context):
    return context.task_result.id


@task
async def async_slow_add(a, b):
    import asyncio

    await asyncio.sleep(0.3)
    return a + b


@task(takes_context=True)
async def async_with_context(context, rows):
    context.reporter.set_units(1)
    context.reporter.advance(rows)
    context.reporter.finish_unit()
    return {"attempt": context.attempt, "result_id": context.task_result.id}
