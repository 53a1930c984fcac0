"""An index class the apps need that Django ships only with ``django.contrib.postgres``.

``django.contrib.postgres.indexes.GinIndex`` makes ``django.contrib.postgres`` a required app
(system check postgres.E005); a site that installs these apps should not have to add it. This
is the same ``CREATE INDEX … USING gin`` with an operator class, and nothing else.
"""

from __future__ import annotations

from django.db import models


class JsonbPathIndex(models.Index):
    """A GIN index over a jsonb column with ``jsonb_path_ops``: it answers ``@>`` (containment)
    and nothing else, smaller and faster than the default ``jsonb_ops`` for that."""

    suffix = "gin"

    def __init__(self, *, fields, name, condition=None):
        super().__init__(fields=fields, name=name, condition=condition, opclasses=["jsonb_path_ops"] * len(fields))

    def deconstruct(self):
        path, args, kwargs = super().deconstruct()
        kwargs.pop("opclasses", None)
        return path, args, kwargs

    def create_sql(self, model, schema_editor, using="", **kwargs):
        return super().create_sql(model, schema_editor, using=" USING gin", **kwargs)
