"""Dependencies between occurrences (SPEC §10): linking a child to its parents, and deciding
children when a parent becomes terminal.

Edges live in ``jobledger_dependencies(parent_seq, child_seq)``; a ``blocked`` child keeps a
counter of the parents it still waits for (``pending_parents``). Every decision is written in the
transaction that makes the deciding parent terminal, so no worker or sweep is needed:

* a parent **succeeded** — each blocked child's counter drops by one (one ``UPDATE`` for all the
  parents a transaction settles, through the edge primary key: O(edges of those parents), never
  a scan); at zero the child is ``queued``, due at ``max(available_at, now)``, through staging
  (gate 1), with ``occurrence_unblocked``;
* a parent **failed** (dead-lettered or cancelled) — blocked children whose policy is
  ``"cancel"`` are cancelled (reason ``parent_failed``, with an ``occurrence_cancelled`` event and
  an audit record), and so on down the graph; children whose policy is ``"run"`` count it as
  terminal, as for a success;
* an **outcome-unknown** dead letter (SPEC §9) decides nothing: its children stay blocked until
  the adjudication — *applied* settles it succeeded and decides them (the adjudication calls
  :func:`decide_children`); *not applied* runs it again, and that run's outcome decides.

A parent is decided once. A dead letter an operator requeues already decided its children (it
cancelled them, or counted for them), so its later outcome is not counted again — unless it
was an outcome-unknown dead letter, which had decided nothing, or the requeue revived its
children (``revive.py``: the earlier decision is undone, the next outcome decides).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ... import contract
from ...errors import NotFound
from .. import common
from ..tx import Row, Tx, WorkSignal
from .revive import children_decided

__all__ = [
    "PARENT_FAILED_ERROR",
    "Decided",
    "decide_children",
    "link_children",
    "parents_terminal",
]

# An outcome-unknown error code, as adjudication recognises it (SPEC §9).
PARENT_FAILED_ERROR: Final = {
    "code": "parent_failed",
    "message": "A parent occurrence was dead-lettered or cancelled",
}
TERMINAL: Final = contract.TERMINAL_STATUSES
# Who cancels a child for its failed parent, in its event and audit record.
CASCADE_ACTOR: Final = "jobledger"


@dataclass(slots=True)
class Decided:
    """What deciding children changed: occurrences unblocked (now queued) and cancelled."""

    unblocked: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


def _failed(row: Row) -> bool:
    """A terminal parent that failed (dead-lettered, not outcome-unknown, or cancelled)."""
    return row["status"] == "cancelled" or (
        row["status"] == "dead_letter" and not _outcome_unknown(row["last_error_json"])
    )


def _outcome_unknown(error_json: str | None) -> bool:
    if error_json is None:
        return False
    return common.is_outcome_unknown(contract.parse_stored_json(error_json))


def _decided_parent(row: Row) -> bool:
    """True when this parent no longer holds its children back: succeeded or failed."""
    return row["status"] == "succeeded" or _failed(row)


# -- linking ----------------------------------------------------------------------------------


def link_children(
    tx: Tx, now: int, children: Sequence[tuple[str, Sequence[str], str]], batch_ids: Sequence[str]
) -> Decided:
    """Link each new child ``(child_id, parent_ids, policy)`` to its parents, in order.

    Parents must exist: written before this batch, or earlier in it (``batch_ids`` is the
    batch's occurrence ids in input order), which keeps every graph acyclic. An unknown parent
    raises ``SCHEDULER_NOT_FOUND`` (the caller's transaction then writes nothing). A child whose
    parents are all decided is left ``queued``; one with a failed parent under ``"cancel"`` is
    cancelled at once; otherwise it is ``blocked`` on the parents still undecided.
    """
    decided = Decided()
    position: dict[str, int] = {}
    for index, occurrence_id in enumerate(batch_ids):
        position.setdefault(occurrence_id, index)  # a key used twice: where it was written
    wanted = sorted({parent for _, parents, _ in children for parent in parents})
    wanted_rows = wanted + [child for child, _, _ in children]
    found = {
        row["occurrence_id"]: row
        for row in tx.all("occurrences_by_ids", {"ids": tx.id_list(sorted(set(wanted_rows)))})
    }
    edges: list[dict[str, Any]] = []
    for child_id, parents, policy in children:
        child = found[child_id]
        for parent in parents:
            row = found.get(parent)
            # A parent later in the batch (or the child itself) did not exist when the child
            # was enqueued: refused as unknown, so no cycle can be written.
            if row is None or position.get(parent, -1) >= position[child_id]:
                raise NotFound(
                    f"Parent occurrence does not exist: {parent}",
                    details={"occurrenceId": child_id, "parent": parent},
                )
            edges.append({"parent_seq": int(row["seq"]), "child_seq": int(child["seq"])})
        rows = [found[parent] for parent in parents]
        failed = next((row for row in rows if _failed(row)), None)
        pending = sum(1 for row in rows if not _decided_parent(row))
        if failed is not None and policy == "cancel":
            pending = 0
        tx.one(
            "link_child",
            {"seq": int(child["seq"]), "pending": pending, "policy": policy, "now": now},
        )
        if failed is not None and policy == "cancel":
            # Cancelled as it is written: a later child of the same batch sees a failed parent.
            found[child_id] = _cancel_new_child(tx, now, child, failed["occurrence_id"])
            decided.cancelled.append(child_id)
    if edges:
        tx.many("insert_dependency", edges)
    return decided


def _cancel_new_child(tx: Tx, now: int, child: Row, parent_id: str) -> Row:
    error = {**PARENT_FAILED_ERROR, "parent": parent_id}
    row = tx.one(
        "cancel_occurrence",
        {
            "occurrence_id": child["occurrence_id"],
            "error_json": contract.canonical_json(error, "error"),
            "now": now,
        },
    )
    assert row is not None  # just inserted, so live
    _record_cancellations(tx, now, [row], parent_id, "queued")
    return row


# -- deciding children ------------------------------------------------------------------------


def parents_terminal(tx: Tx, now: int, parents: Sequence[Row]) -> Decided:
    """Decide the blocked children of parents that just became terminal.

    ``parents`` are occurrence rows (``seq``, ``occurrence_id``, ``status``,
    ``last_error_json``) as the transaction that settled, dead-lettered or cancelled them left
    them. One probe finds which of them have blocked children; only those are read further.
    Failed parents cancel their ``"cancel"`` children first (and so on down the graph); then
    one statement counts every decided parent — including the children just cancelled — for
    the blocked children left. Outcome-unknown dead letters are skipped (their children wait
    for the decision).
    """
    decided = Decided()
    candidates = [row for row in parents if _decided_parent(row)]
    if not candidates:
        return decided
    by_seq = {int(row["seq"]): row for row in candidates}
    with_children = tx.all("parents_with_blocked_children", {"ids": tx.id_list(sorted(by_seq))})
    deciding = [
        by_seq[int(found["parent_seq"])]
        for found in with_children
        if not (found["requeued"] and _decided_before(tx, by_seq[int(found["parent_seq"])]))
    ]
    counted: list[int] = []
    work = [parent for parent in deciding if _failed(parent)]
    counted.extend(int(parent["seq"]) for parent in deciding)
    while work:
        parent = work.pop()
        cancelled = tx.all(
            "cancel_children",
            {
                "parent_seq": int(parent["seq"]),
                "error_json": contract.canonical_json(
                    {**PARENT_FAILED_ERROR, "parent": parent["occurrence_id"]}, "error"
                ),
                "now": now,
            },
        )
        if cancelled:
            _record_cancellations(tx, now, cancelled, parent["occurrence_id"], "blocked")
            decided.cancelled.extend(row["occurrence_id"] for row in cancelled)
            # Each cancelled child is a failed parent in turn (the graph is acyclic: this
            # ends), and counts as decided for its own "run" children.
            work.extend(cancelled)
            counted.extend(int(row["seq"]) for row in cancelled)
    if not counted:
        return decided
    released = tx.all("release_children", {"ids": tx.id_list(sorted(set(counted))), "now": now})
    unblocked = [row for row in released if row["status"] == "queued"]
    if unblocked:
        tx.run(
            "insert_events",
            tx.table(
                [
                    common.event_params(
                        job_id=row["job_id"],
                        occurrence_id=row["occurrence_id"],
                        event_type="occurrence_unblocked",
                        occurred_at=int(row["updated_at"]),
                        data_json="{}",
                    )
                    for row in unblocked
                ]
            ),
        )
        decided.unblocked.extend(row["occurrence_id"] for row in unblocked)
    return decided


def decide_children(tx: Tx, now: int, parents: Sequence[Row], signal: WorkSignal) -> Decided:
    """:func:`parents_terminal`, called by every path that makes occurrences terminal (settle,
    the lazy dead-letter sweep, cancellation). Unblocked children wake this process's idle
    workers at once: on SQLite their claim waits for this transaction's commit (one writer at a
    time), on PostgreSQL it may run first and miss them, and the commit's NOTIFY
    (``release_children`` is a waking query) wakes them again."""
    decided = parents_terminal(tx, now, [row for row in parents if row["status"] in TERMINAL])
    if decided.unblocked:
        signal.notify()
    return decided


def _decided_before(tx: Tx, parent: Row) -> bool:
    """True when this parent was terminal before, was requeued, and that earlier outcome
    already decided its children (anything but an outcome-unknown dead letter did) — unless a
    requeue with ``revive_children`` undid it since (``revive.py``)."""
    return children_decided(tx, parent["occurrence_id"], now_failed=False)


def _record_cancellations(
    tx: Tx, now: int, cancelled: Sequence[Row], parent_id: str, previous: str
) -> None:
    """The event and audit record of each child cancelled for a failed parent."""
    events = [
        common.event_params(
            job_id=row["job_id"],
            occurrence_id=row["occurrence_id"],
            event_type="occurrence_cancelled",
            occurred_at=int(row["updated_at"]),
            data_json=contract.canonical_json(
                {
                    "actor": CASCADE_ACTOR,
                    "parent": parent_id,
                    "previousStatus": previous,
                    "reason": "parent_failed",
                },
                "event.data",
            ),
        )
        for row in cancelled
    ]
    tx.run("insert_events", tx.table(events))
    tx.many(
        "insert_audit",
        [
            {
                "now": now,
                "action": "occurrence_cancelled",
                "actor": CASCADE_ACTOR,
                "subject": row["occurrence_id"],
                "data_json": contract.canonical_json(
                    {"parent": parent_id, "reason": "parent_failed"}, "audit.data"
                ),
            }
            for row in cancelled
        ],
    )
