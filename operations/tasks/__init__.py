"""Django's task framework (``django.tasks``) on operations: the backend and how a task runs.

- ``backend``: ``OperationsBackend``, the ``TASKS`` backend that stores each task as an
  operation and its work item;
- ``compat``: Django 6's ``django.tasks`` or the ``django-tasks`` backport on Django 5.2.
"""
