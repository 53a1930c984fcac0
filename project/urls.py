from django.contrib import admin
from django.urls import include, path

from project import views
from workqueue.metrics import metrics_view

urlpatterns = [
    # The demo's own pages (templates/ beside project/): its landing page and the docs it links.
    path("", views.index, name="demo-index"),
    path("docs/<str:name>", views.docs, name="demo-docs"),
    path("admin/", admin.site.urls),
    # The operations read surface: /api/operations, /api/operations/{id}, .../watch (SSE).
    path("api/", include("operations.urls")),
    # The HTTP pull API for self-hosted workers, at the root so /v1/environments/... works.
    path("", include("workqueue.wire.urls")),
    # Prometheus gauges read at scrape time (docs/self-hosted-workers.md, "Metrics").
    path("metrics", metrics_view, name="metrics"),
]
