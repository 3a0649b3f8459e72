"""Flows after a fix (SPEC §14): a requeued parent takes back the children it cancelled.

When a parent fails, its ``"cancel"`` children are cancelled (reason ``parent_failed``, naming
the parent) and so on down the graph, and its ``"run"`` children count it as decided
(``store/operations/dependencies.py``). ``requeue_dead_letter(..., revive_children=True)``
undoes that decision in the requeue's own transaction, so the graph follows the parent's new
run as if it had never failed:

* each child cancelled *because of* this parent (its error is ``parent_failed`` naming it) is
  ``blocked`` again, waiting for every parent that has not succeeded — unless another of its
  parents failed too (it would be cancelled again at once: it is left cancelled);
* each ``"run"`` child still blocked waits for this parent again (its counter grows by one);
* the same, recursively, for the revived children's own descendants the cascade cancelled.

Each revived occurrence gets an ``occurrence_revived`` event and an audit record. The requeue
row records ``revived_children``, which tells :func:`dependencies.decide_children` that the
parent's earlier outcome no longer decides its children: its next outcome does.
"""

from __future__ import annotations

from typing import Any, Final

from ... import contract
from .. import common
from ..tx import Row, Tx

__all__ = ["REVIVE_ACTION", "children_decided", "revive_descendants"]

REVIVE_ACTION: Final = "occurrence_revived"
_FAILED_PARENT_CODE: Final = "parent_failed"


def _error(row: Row) -> dict[str, Any]:
    encoded = row["last_error_json"]
    error = None if encoded is None else contract.parse_stored_json(encoded)
    return error if isinstance(error, dict) else {}


def _failed(row: Row) -> bool:
    """A parent that failed for its children (dependencies._failed, on parent_states rows)."""
    return row["status"] == "cancelled" or (
        row["status"] == "dead_letter" and not common.is_outcome_unknown(_error(row))
    )


def children_decided(tx: Tx, occurrence_id: str, *, now_failed: bool) -> bool:
    """Whether this occurrence's failure stands as the decision for its children: some outcome
    of it decided them (any but an outcome-unknown dead letter does) and no requeue with
    ``revive_children`` undid that since. ``now_failed``: its present outcome decides them."""
    decided = False
    for requeue in tx.all("requeues_of_occurrence", {"occurrence_id": occurrence_id}):
        encoded = requeue["previous_error_json"]
        previous = None if encoded is None else contract.parse_stored_json(encoded)
        if not common.is_outcome_unknown(previous):
            decided = True
        if int(requeue["revived_children"]):
            decided = False
    return decided or now_failed


def revive_descendants(tx: Tx, now: int, parent: Row, parent_id: str, actor: str) -> list[str]:
    """Undo the decision of ``parent`` (its row as the dead letter, before the requeue) on its
    descendants, as the module docstring says; the ids revived, in the order revived."""
    if not children_decided(tx, parent_id, now_failed=_failed(parent)):
        return []  # its failure decided nothing (outcome unknown): nothing to undo
    revived: list[str] = []
    work: list[tuple[int, str]] = [(int(parent["seq"]), parent_id)]
    while work:
        seq, occurrence_id = work.pop(0)
        tx.run("rewait_run_children", {"parent_seq": seq})
        for child in tx.all("cancelled_children", {"parent_seq": seq}):
            error = _error(child)
            if error.get("code") != _FAILED_PARENT_CODE or error.get("parent") != occurrence_id:
                continue  # cancelled by an operator, or by another parent
            parents = tx.all("parent_states", {"seq": int(child["seq"])})
            if any(_failed(row) for row in parents if int(row["seq"]) != seq):
                continue
            pending = sum(1 for row in parents if row["status"] != "succeeded")
            row = tx.one(
                "revive_child",
                {"seq": int(child["seq"]), "pending": max(pending, 1), "now": now},
            )
            if row is None:
                continue
            revived.append(row["occurrence_id"])
            work.append((int(row["seq"]), row["occurrence_id"]))
            _record(tx, now, row, parent=occurrence_id, actor=actor, requeued=parent_id)
    return revived


def _record(tx: Tx, now: int, row: Row, *, parent: str, actor: str, requeued: str) -> None:
    data = {"actor": actor, "parent": parent, "reason": "parent_requeued", "requeued": requeued}
    tx.run(
        "insert_event",
        common.event_params(
            job_id=row["job_id"],
            occurrence_id=row["occurrence_id"],
            event_type=REVIVE_ACTION,
            occurred_at=int(row["updated_at"]),
            data_json=contract.canonical_json(data, "event.data"),
        ),
    )
    tx.run(
        "insert_audit",
        {
            "now": now,
            "action": REVIVE_ACTION,
            "actor": actor,
            "subject": row["occurrence_id"],
            "data_json": contract.canonical_json(
                {"parent": parent, "requeued": requeued}, "audit.data"
            ),
        },
    )
