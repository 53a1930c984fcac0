"""URLconf of the wire API; include it at the root so /v1/environments/... resolves.

``poll`` and ``stats`` come before ``<work_id>``: work ids always start with ``work_``, so the
two never collide.
"""

from django.urls import path

from workqueue.wire import views

app_name = "workqueue_wire"

urlpatterns = [
    path("v1/environments/<str:environment_id>/work/poll", views.poll, name="poll"),
    path("v1/environments/<str:environment_id>/work/stats", views.stats, name="stats"),
    path("v1/environments/<str:environment_id>/work", views.work_list, name="list"),
    path("v1/environments/<str:environment_id>/work/<str:work_id>", views.work_item, name="item"),
    path("v1/environments/<str:environment_id>/work/<str:work_id>/ack", views.ack, name="ack"),
    path("v1/environments/<str:environment_id>/work/<str:work_id>/heartbeat", views.heartbeat, name="heartbeat"),
    path("v1/environments/<str:environment_id>/work/<str:work_id>/stop", views.stop, name="stop"),
]
