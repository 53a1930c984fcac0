"""URLconf of the operations HTTP surface; include it under a prefix of your choosing::

path("api/", include("operations.urls"))   # → /api/operations, /api/operations/{id}, ...
"""

from django.urls import path

from operations import http

app_name = "operations"

urlpatterns = [
    path("operations", http.list_operations, name="list"),
    path("operations/<str:op_id>/cancel", http.cancel_operation, name="cancel"),
    path("operations/<str:op_id>/watch", http.watch_operation, name="watch"),
    path("operations/<str:op_id>/children", http.list_children, name="children"),
    # Also answers POST operations/{id}:cancel (AIP-151's custom-method form).
    path("operations/<str:op_id>", http.operation, name="detail"),
]
