from django.contrib import admin
from django.urls import include, path

from workqueue.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    # The operations read surface: /api/operations, /api/operations/{id}, .../watch (SSE).
    path("api/", include("operations.urls")),
    # The HTTP pull API for self-hosted workers, at the root so /v1/environments/... works.
    path("", include("workqueue.wire.urls")),
    # Prometheus gauges read at scrape time (docs/self-hosted-workers.md, "Metrics").
    path("metrics", metrics_view, name="metrics"),
]
