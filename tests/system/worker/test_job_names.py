"""Two names per task (issue 32 item 8): enqueueing a job's *kind*, or a near miss of a job id,
is ``SCHEDULER_NOT_FOUND`` with "did you mean job send-confirmation (kind send_confirmation)?",
on both stores and through every door (enqueue, enqueue_many, a flow)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import jobledger


@pytest.fixture
def app(any_target: str) -> Iterator[jobledger.App]:
    made = jobledger.App(any_target, name="names", authorize=jobledger.allow_all)
    with made:
        made.ensure_job("send-confirmation", "send_confirmation")
        made.ensure_job("charge-card", "charge")
        yield made


def refused(call: object) -> jobledger.SchedulerError:
    with pytest.raises(jobledger.SchedulerError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.code == "SCHEDULER_NOT_FOUND"
    return caught.value


HINT = "did you mean job send-confirmation (kind send_confirmation)?"


def test_the_kind_instead_of_the_job_id_names_the_job(app):
    error = refused(lambda: app.enqueue("send_confirmation", payload={"order": 21}))
    assert str(error).endswith(HINT)
    assert error.details["suggestions"] == [
        {"jobId": "send-confirmation", "kind": "send_confirmation"}
    ]
    assert app.store.count_occurrences() == []  # nothing written


def test_a_near_miss_of_a_job_id_or_kind_names_the_job(app):
    assert str(refused(lambda: app.enqueue("send-confirmaton"))).endswith(HINT)
    assert str(refused(lambda: app.enqueue("send_confirmations"))).endswith(HINT)
    assert "did you mean job charge-card (kind charge)" in str(
        refused(lambda: app.enqueue("charge_card"))
    )


def test_a_name_like_nothing_gets_no_guess(app):
    error = refused(lambda: app.enqueue("nightly-report"))
    assert str(error).endswith("Scheduler job does not exist: nightly-report")
    assert error.details["suggestions"] == []


def test_every_door_gives_the_hint(app):
    assert str(refused(lambda: app.enqueue_many("send_confirmation", [{}, {}]))).endswith(HINT)

    def build() -> None:
        with app.flow() as flow:
            flow.enqueue("send_confirmation")

    assert str(refused(build)).endswith(HINT)
