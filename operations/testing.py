"""Helpers for testing code that starts operations (a site's own tests).

    from operations.testing import OperationFactory
    from workqueue import testing

    def test_the_export_page_shows_progress(client, db):
        op = OperationFactory(kind="reports.export", halfway=True)
        assert "5 of 10" in client.get(f"/exports/{op.id}/").text

    def test_an_export_runs(db):
        op = operations.start("reports.export", {"month": "2026-10"})
        testing.drain(["operations"])          # runs the kind here, now
        op.refresh_from_db()
        assert op.state == "succeeded"

``OperationFactory`` (``operations.factories``) needs factory-boy, the ``testing`` extra; it is
imported only when asked for, so a site without it pays nothing for this module.
"""

from __future__ import annotations

from typing import Any

FACTORIES = ("OperationFactory",)
EXTRA = "pip install 'django-workqueue-operations[testing]'"

__all__ = list(FACTORIES)


def __getattr__(name: str) -> Any:
    if name in FACTORIES:
        from operations import factories  # raises ImportError naming the extra without factory-boy

        return getattr(factories, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
