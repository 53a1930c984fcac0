import pytest

from tests.testapp.models import Completion
from workqueue.models import WorkItem


@pytest.mark.django_db(transaction=True)
def test_runworker_drains_a_queue(start_worker):
    WorkItem.objects.enqueue_many([("test.record", f"k{i}") for i in range(20)])
    proc = start_worker("--queue", "test.record", "--max-items", "20", "--batch", "5")
    assert proc.wait(60) == 0, proc.output()
    assert Completion.objects.count() == 20
    assert WorkItem.objects.live().count() == 0
