"""The demo site's own pages: the landing page at ``/`` and the docs it links (templates/)."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render


def _docs() -> dict[str, object]:
    """The documents the demo serves, by name: the README and docs/*.md, nothing else."""
    root = settings.BASE_DIR
    found = {"README.md": root / "README.md"}
    found.update({path.name: path for path in sorted((root / "docs").glob("*.md"))})
    return found


def index(request: HttpRequest) -> HttpResponse:
    """Where the demo starts: links to the admin, the dashboard, the API, the metrics, the docs."""
    return render(request, "index.html", {"docs": [name for name in _docs() if name != "README.md"]})


def docs(request: HttpRequest, name: str) -> HttpResponse:
    """One of the documents, as the Markdown text it is written in."""
    path = _docs().get(name)
    if path is None:
        raise Http404(f"no document {name!r}")
    return HttpResponse(path.read_bytes(), content_type="text/markdown; charset=utf-8")
