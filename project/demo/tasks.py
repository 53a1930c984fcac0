"""Demo ``@task``s, written exactly as Django's documentation writes them."""

import asyncio
import time

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task


@task
def add(a, b):
    return a + b


@task(queue_name="emails", priority=10)
def send_welcome(user_id):
    time.sleep(0.2)
    return {"sent_to": user_id}


@task(takes_context=True)
def crunch(context, rows):
    reporter = context.reporter  # our extra: progress and cancellation
    reporter.set_units(rows // 100 or 1)
    for start in range(0, rows, 100):
        if context.is_cancelled():
            return {"stopped_at": start}
        reporter.start_unit(f"rows {start}-{start + 99}")
        time.sleep(0.1)
        reporter.advance(100)
        reporter.finish_unit()
    return {"rows": rows, "attempt": context.attempt}


@task
async def fetch_title(url):
    """An ``async def`` task: awaited on the worker's event loop, many at once."""
    await asyncio.sleep(0.5)  # stands for an HTTP request (httpx.AsyncClient, aiohttp...)
    return {"url": url, "title": f"Title of {url}"}
