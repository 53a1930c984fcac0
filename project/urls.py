from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The operations read surface: /api/operations, /api/operations/{id}, .../watch (SSE).
    path("api/", include("operations.urls")),
    # The HTTP pull API for self-hosted workers, at the root so /v1/environments/... works.
    path("", include("workqueue.wire.urls")),
]
