"""The chaos checks themselves, on evidence made by hand: each new check must be able to fail."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from .checks import Evidence, verify
from .harness import RunLog

OCC = "occ_1"


def _event(event_id: int, kind: str, at: int, **extra: Any) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "job_id": "job",
        "occurrence_id": OCC,
        "event_type": kind,
        "occurred_at": at,
        "owner_id": extra.pop("owner", "w1"),
        "fence": extra.pop("fence", 1),
        "data": extra.pop("data", {}),
    }


def _verify(events: list[dict[str, Any]], log: RunLog | None = None) -> tuple[list[str], dict]:
    occurrence = {
        "occurrence_id": OCC,
        "job_id": "job",
        "kind": "work",
        "trigger_key": "t",
        "scheduled_for": 0,
        "status": "running",
        "attempt": 1,
        "max_attempts": 3,
        "fence": 1,
        "lease_owner": "w1",
        "last_error_json": None,
        "result_json": None,
    }
    evidence = Evidence({OCC: occurrence}, {OCC: events}, [], {}, ["ok"], True, [])
    harness = SimpleNamespace(log=log or RunLog())
    return verify(harness, evidence)  # type: ignore[arg-type]


def test_an_audit_log_that_goes_back_in_time_is_a_problem():
    problems, _ = _verify(
        [
            _event(1, "occurrence_claimed", 1_000),
            _event(2, "occurrence_lease_expired", 5_000, data={"reason": "owner_gone"}),
            _event(3, "occurrence_renewed", 4_990),
        ]
    )
    assert any("time went back" in p and "occurrence_renewed at 4990" in p for p in problems)


def test_an_audit_log_in_order_is_not():
    problems, _ = _verify(
        [
            _event(1, "occurrence_claimed", 1_000),
            _event(2, "occurrence_renewed", 1_000),
            _event(3, "occurrence_lease_expired", 5_000, data={"reason": "owner_gone"}),
        ]
    )
    assert not any("time went back" in p for p in problems)


def test_a_lease_reaped_before_its_owner_was_stopped_counts_against_a_live_owner():
    log = RunLog()
    log.stops["w1"] = 6_000  # the harness asked w1 to stop at 6 s
    trail = [
        _event(1, "occurrence_claimed", 1_000),
        _event(2, "occurrence_lease_expired", 5_000, data={"reason": "owner_gone"}),
    ]
    _, facts = _verify(trail, log)
    assert facts["reaped_live_owner"] == {"w1": 1}
    log.stops["w1"] = 4_000  # asked to stop before the reap: a stopped worker, not a live one
    _, facts = _verify(trail, log)
    assert facts["reaped_live_owner"] == {}


def test_with_a_live_mark_every_takeover_up_to_it_counts_against_a_live_owner():
    """Clock-step runs: store instants are on stepped clocks, so liveness is judged by audit
    order — a reclaim or a lease_expired dead letter up to the mark was taken from a live owner,
    one after it was not."""
    log = RunLog()
    log.live_through_event = 3
    trail = [
        _event(1, "occurrence_claimed", 1_000),
        # w2's clock is two hours ahead: w1's lease looks expired to it
        _event(
            2,
            "occurrence_reclaimed",
            7_201_000,
            owner="w2",
            fence=2,
            data={"previousStatus": "running"},
        ),
        _event(
            3,
            "occurrence_dead_lettered",
            7_202_000,
            owner="w2",
            fence=2,
            data={"reason": "lease_expired"},
        ),
    ]
    _, facts = _verify(trail, log)
    assert facts["taken_over_from_live_owner"] == {
        "reclaimed_expired_lease": 1,
        "dead_lettered_lease_expired": 1,
    }
    log.live_through_event = 1  # both written after every worker was asked to stop
    _, facts = _verify(trail, log)
    assert facts["taken_over_from_live_owner"] == {}
    log.live_through_event = None  # not a clock-step run: not counted at all
    _, facts = _verify(trail, log)
    assert facts["taken_over_from_live_owner"] == {}
