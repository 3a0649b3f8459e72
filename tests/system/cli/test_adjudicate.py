"""``jobledger adjudicate list | show | decide`` (SPEC §9) on both stores."""

from __future__ import annotations

import jobledger
from tests.system.cli.conftest import AUTHORITY, TtyInput

UNKNOWN = {"code": "SCHEDULER_OUTCOME_UNKNOWN", "message": "the gateway timed out"}


def _case(store: jobledger.Store, key: str) -> str:
    if store.get_job("pay") is None:
        store.create_job(id="pay", kind="charge", authority=AUTHORITY, on_lost_lease="adjudicate")
    occurrence = store.enqueue_occurrence(job_id="pay", scheduled_for=store.now(), trigger_key=key)
    claimed = store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=60_000)
    assert claimed is not None
    store.settle(
        occurrence_id=claimed.id,
        owner_id="w",
        fence=claimed.fence,
        outcome="failed",
        error=UNKNOWN,
        retryable=False,
    )
    return occurrence.id


def test_list_show_and_decide(cli):
    with cli.open() as store:
        first = _case(store, "a")
        second = _case(store, "b")
    listed = cli.json("adjudicate", "list")
    assert {case["occurrenceId"] for case in listed["cases"]} == {first, second}
    assert all(case["eligible"] for case in listed["cases"])
    table = cli.ok("adjudicate", "list").out
    assert "SCHEDULER_OUTCOME_UNKNOWN: the gateway timed out" in table
    shown = cli.json("adjudicate", "show", first)["case"]
    assert shown["evidenceDigest"].startswith("sha256:")
    assert "evidence    sha256:" in cli.ok("adjudicate", "show", first[:16]).out

    # Without a terminal and without --yes, the decision is refused, nothing written.
    refused = cli("adjudicate", "decide", first, "applied", "--reason", "PSP shows it")
    refused.assert_one_line_error("SCHEDULER_CONFIRMATION_REQUIRED", 2)
    assert cli.json("adjudicate", "show", first)["case"]["eligible"] is True
    # Answered "y" at the prompt: recorded with the actor.
    decided = cli.json(
        "--actor",
        "ops:alice",
        "adjudicate",
        "decide",
        first,
        "applied",
        "--reason",
        "PSP shows it",
        stdin=TtyInput("y\n"),
    )
    assert decided["actor"] == "ops:alice"
    assert decided["case"]["status"] == "succeeded"
    assert decided["case"]["adjudication"]["actor"] == "ops:alice"
    assert decided["case"]["adjudication"]["decision"] == "applied"
    # A second decision is refused (exit 4, one coded line).
    again = cli("--yes", "adjudicate", "decide", first, "not_applied", "--reason", "again")
    again.assert_one_line_error("SCHEDULER_ADJUDICATION_ALREADY_RECORDED", 4)
    # A pinned stale digest is refused.
    stale = cli(
        "--yes",
        "adjudicate",
        "decide",
        second,
        "not_applied",
        "--reason",
        "no charge",
        "--evidence-digest",
        "sha256:" + "a" * 64,
    )
    stale.assert_one_line_error("SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT", 4)
    text = cli.ok("--yes", "adjudicate", "decide", second, "not_applied", "--reason", "no")
    assert f"recorded not_applied for {second}: now retry_wait" in text.out
    assert cli.json("adjudicate", "list") == {"cases": []}
    assert cli.ok("adjudicate", "list").out.strip() == "no open cases"


def test_a_plain_requeue_of_an_open_case_is_refused_and_points_to_adjudicate(cli):
    """Issue 32 item 9: `dead-letter requeue` (one, or --all) refuses an outcome-unknown dead
    letter nobody decided; --override-adjudication requeues it, recorded in the audit log."""
    with cli.open() as store:
        occurrence_id = _case(store, "a")
    refused = cli("dead-letter", "requeue", occurrence_id, "--reason", "retry")
    refused.assert_one_line_error("SCHEDULER_REQUEUE_NEEDS_ADJUDICATION", 4)
    assert "jobledger adjudicate decide" in refused.err
    every = cli("dead-letter", "requeue", "--all", "--yes", "--reason", "retry")
    every.assert_one_line_error("SCHEDULER_REQUEUE_NEEDS_ADJUDICATION", 4)
    assert cli.json("adjudicate", "show", occurrence_id)["case"]["eligible"] is True
    forced = cli.json(
        "dead-letter",
        "requeue",
        occurrence_id,
        "--reason",
        "PSP confirmed nothing arrived",
        "--override-adjudication",
    )
    assert [o["id"] for o in forced["requeued"]] == [occurrence_id]
    with cli.open() as store:
        [audit] = [e for e in store.audit_log(limit=10) if e.action == "occurrence_requeued"]
    assert audit.data["overrideAdjudication"] is True


def test_an_applied_decision_can_carry_the_handlers_result(cli):
    with cli.open() as store:
        occurrence_id = _case(store, "a")
    decided = cli.json(
        "adjudicate",
        "decide",
        occurrence_id,
        "applied",
        "--reason",
        "PSP shows it",
        "--result",
        '{"charge": "ch_1"}',
        "--yes",
    )
    assert decided["case"]["status"] == "succeeded"
    with cli.open() as store:
        assert store.get_occurrence(occurrence_id).result == {"charge": "ch_1"}


def test_a_lost_rerun_is_listed_as_a_case_of_its_own_with_when_it_began(cli):
    """Issue 30 (items 5 and 6): the re-run not_applied granted is lost again — a new case,
    listed and decidable; every case says when its handler began."""
    with cli.open() as store:
        first = _case(store, "a")
        began = store.get_occurrence(first).started_at
    assert began is not None
    listed = cli.json("adjudicate", "list")["cases"]
    assert [(c["occurrenceId"], c["startedAt"]) for c in listed] == [(first, began)]
    assert "STARTED" in cli.ok("adjudicate", "list").out
    cli.ok("adjudicate", "decide", first, "not_applied", "--reason", "no charge", "--yes")
    assert cli.json("adjudicate", "list")["cases"] == []
    with cli.open() as store:
        rerun = store.claim_occurrence(occurrence_id=first, owner_id="w", lease_ms=60_000)
        assert rerun is not None
        store.settle(
            occurrence_id=first,
            owner_id="w",
            fence=rerun.fence,
            outcome="failed",
            error=UNKNOWN,
            retryable=False,
        )
    [again] = cli.json("adjudicate", "list")["cases"]
    assert (again["occurrenceId"], again["fence"], again["eligible"]) == (first, rerun.fence, True)
    assert [d["decision"] for d in again["previous"]] == ["not_applied"]
    shown = cli.ok("adjudicate", "show", first).out
    assert "started     " in shown and "earlier     fence" in shown
    decided = cli.json("adjudicate", "decide", first, "applied", "--reason", "PSP: paid", "--yes")
    assert decided["case"]["status"] == "succeeded"
    assert cli.json("adjudicate", "list")["cases"] == []
