"""requests_at_once: independent requests side by side, answers in order, failures after all ran."""

import threading

import pytest

from kubeslurm.reconcile.apply_objects import apply_waves
from kubeslurm.reconcile.requests_at_once import REQUESTS_AT_ONCE, each_at_once


def test_calls_run_side_by_side_and_answers_come_in_the_items_order():
    # Each call waits until every one has started: one after another, the first would wait forever.
    started = threading.Barrier(REQUESTS_AT_ONCE, timeout=10)

    def call(item):
        started.wait()
        return item * 10

    answered = []
    each_at_once(call, list(range(REQUESTS_AT_ONCE)), lambda item, answer: answered.append((item, answer)))
    assert answered == [(item, item * 10) for item in range(REQUESTS_AT_ONCE)]


def test_more_items_than_threads_all_get_answered():
    answered = []
    each_at_once(lambda item: -item, list(range(3 * REQUESTS_AT_ONCE + 1)), lambda item, answer: answered.append(answer))
    assert answered == [-item for item in range(3 * REQUESTS_AT_ONCE + 1)]


def test_a_failure_is_raised_after_every_call_ran_and_the_successes_were_answered():
    ran, answered = [], []

    def call(item):
        ran.append(item)
        if item in (2, 4):
            raise ValueError(f"item {item} refused")
        return item

    with pytest.raises(ValueError, match="item 2 refused"):  # the first failure in the items' order
        each_at_once(call, [1, 2, 3, 4, 5], lambda item, answer: answered.append(item))
    assert sorted(ran) == [1, 2, 3, 4, 5]
    assert answered == [1, 3, 5]


def test_one_item_is_called_on_the_callers_thread_and_none_calls_nothing():
    threads = []
    each_at_once(lambda item: threads.append(threading.current_thread()), ["only"], lambda item, answer: None)
    assert threads == [threading.current_thread()]
    each_at_once(lambda item: pytest.fail("called"), [], lambda item, answer: pytest.fail("answered"))


def _obj(kind, name):
    return {"kind": kind, "metadata": {"name": name}}


@pytest.mark.parametrize("objects, waves", [
    pytest.param(
        [_obj("Secret", "auth"), _obj("PersistentVolumeClaim", "state"), _obj("ConfigMap", "conf"),
         _obj("StatefulSet", "mariadb"), _obj("Service", "db"), _obj("PersistentVolumeClaim", "home"),
         _obj("StatefulSet", "controller"), _obj("NodeSet", "h100"), _obj("DaemonSet", "plugin"),
         _obj("ServiceAccount", "plugin")],
        [["state", "home"], ["auth", "conf", "db", "h100", "plugin"], ["mariadb", "controller", "plugin"]],
        id="claims, then what pods mount or run as, then what makes pods; each in the render's order"),
    pytest.param([_obj("StatefulSet", "h100")], [[], [], ["h100"]], id="a scale-up: one StatefulSet"),
    pytest.param([], [[], [], []], id="a steady cluster: nothing to apply"),
])
def test_apply_waves(objects, waves):
    assert [[obj["metadata"]["name"] for obj in wave] for wave in apply_waves(objects)] == waves
