"""A django.tasks task shows in the operations admin as ``task.<module path>`` (README, "Use it as your
django.tasks backend")."""

from django.urls import reverse

from operations.models import Operation
from tests.testapp.tasks import send_email


def test_an_enqueued_task_is_listed_under_its_module_path(admin_client):
    result = send_email.enqueue("ada@example.com")
    op = Operation.objects.get(pk=result.id)
    assert op.kind == "task.tests.testapp.tasks.send_email"
    changelist = admin_client.get(reverse("admin:operations_operation_changelist")).content.decode()
    assert "task.tests.testapp.tasks.send_email" in changelist
    by_kind = admin_client.get(
        reverse("admin:operations_operation_changelist"), {"kind": "task.tests.testapp.tasks.send_email"}
    )
    assert [o.pk for o in by_kind.context["cl"].result_list] == [op.pk]
    detail = admin_client.get(reverse("admin:operations_operation_change", args=[op.pk])).content.decode()
    assert "task.tests.testapp.tasks.send_email" in detail
