try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task


@task(queue_name="emails")
def add(a, b):
    return a + b
