"""Leases held: renewals, settlement, release, expiry, and the operator's cancel and requeue.

Settles and renewals are guarded ``UPDATE … RETURNING`` statements: the row decides where an
attempt goes, so nothing is read first, and a batch of them is one pipelined transaction. On
SQLite an owner whose lock file is held may also renew, settle or release a lease that expired
but that nothing ended (``holder_live``; see ``OperationsBase._without_live_leases``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ... import contract
from ...errors import Conflict, LeaseLost, NotFound, RequeueConflict
from ...models import Occurrence, Outcome, Progress, Renewal, Settlement
from .. import common, inputs, rows
from ..tx import Row, Tx
from . import dependencies
from .adjudication import awaits_adjudication, error_code_of
from .admission import Gate, Lane, load_queues, queue_lock
from .base import OperationsBase, required
from .revive import revive_descendants

__all__ = ["LeaseOperations"]


class LeaseOperations(OperationsBase):
    """Leases: renewals, settlement, release, expiry, cancellation and requeue."""

    # -- renewals ---------------------------------------------------------------------------

    def _renew_many(
        self,
        tx: Tx,
        now: int,
        renewals: Sequence[tuple[str, str, int, int]],
        *,
        started: bool = False,
    ) -> list[Occurrence | LeaseLost]:
        """Renew these leases — or, ``started``, mark their handlers started (which renews
        them too: ``mark_started``)."""
        live = self._held_owners({owner for _, owner, _, _ in renewals})
        updated = tx.rows_many(
            "mark_started" if started else "renew_lease",
            [
                {
                    "occurrence_id": key,
                    "owner_id": owner,
                    "fence": fence,
                    "lease_ms": common.checked_lease(now, lease),
                    "now": now,
                    "holder_live": 1 if owner in live else 0,
                }
                for key, owner, fence, lease in renewals
            ],
        )
        results: list[Occurrence | LeaseLost] = []
        events: list[dict[str, Any]] = []
        renewed_rows = self._occurrences(tx, [row for row in updated if row is not None])
        renewed_by_id = {occurrence.id: occurrence for occurrence in renewed_rows}
        for (key, owner, fence, _lease), row in zip(renewals, updated, strict=True):
            if row is None:
                results.append(common.lease_lost(key))
                continue
            renewed = renewed_by_id[key]
            results.append(renewed)
            events.append(
                common.event_params(
                    job_id=renewed.job_id,
                    occurrence_id=key,
                    event_type="occurrence_started" if started else "occurrence_renewed",
                    occurred_at=renewed.updated_at,
                    owner_id=owner,
                    fence=fence,
                    data_json=(
                        f'{{"attempt":{renewed.attempt},'
                        f'"leaseExpiresAt":{renewed.lease_expires_at}}}'
                        if started
                        else f'{{"leaseExpiresAt":{renewed.lease_expires_at}}}'
                    ),
                )
            )
        if events:
            tx.run("insert_events", tx.table(events))
        return results

    def renew(self, *, occurrence_id: str, owner_id: str, fence: int, lease_ms: int) -> Occurrence:
        key, owner, token = inputs.normalize_lease_holder(occurrence_id, owner_id, fence)
        lease = contract.normalize_lease_ms(lease_ms)

        def body(tx: Tx) -> Occurrence:
            [outcome] = self._renew_many(tx, tx.now(), [(key, owner, token, lease)])
            if isinstance(outcome, LeaseLost):
                raise outcome
            return outcome

        return self._write(body)

    def renew_batch(self, renewals: Sequence[Renewal]) -> list[Occurrence | LeaseLost]:
        normalized = inputs.normalize_renewals(renewals)
        if not normalized:
            self._assert_open()
            return []
        return self._write(lambda tx: self._renew_many(tx, tx.now(), normalized))

    # -- progress ---------------------------------------------------------------------------

    def record_progress(
        self,
        *,
        occurrence_id: str,
        owner_id: str,
        fence: int,
        done: int | float,
        total: int | float | None = None,
        message: str | None = None,
    ) -> Progress:
        key, owner, token = inputs.normalize_lease_holder(occurrence_id, owner_id, fence)
        fields = inputs.normalize_progress(done, total, message)

        def body(tx: Tx) -> Progress:
            now = tx.now()
            live = self._held_owners({owner})
            # The stored document (canonical JSON, keys in order) names the attempt the row is
            # at, which the guarded statement itself writes between these two halves.
            rest = contract.canonical_json({**fields, "z": 0})
            found = tx.one(
                "record_progress",
                {
                    "occurrence_id": key,
                    "owner_id": owner,
                    "fence": token,
                    "now": now,
                    "holder_live": 1 if owner in live else 0,
                    "head": f'{{"at":{now},"attempt":',
                    "tail": "," + rest[1 : rest.rindex(',"z":0}')] + "}",
                },
            )
            if found is None:
                raise common.lease_lost(key)
            return Progress(
                done=fields["done"],
                total=fields["total"],
                message=fields["message"],
                attempt=int(found["attempt"]),
                at=now,
            )

        return self._write(body)

    # -- settling ---------------------------------------------------------------------------

    def _settle_many(
        self, tx: Tx, now: int, requests: Sequence[Settlement]
    ) -> list[Occurrence | LeaseLost]:
        live = self._held_owners({request.owner_id for request in requests})
        updated = tx.rows_many(
            "settle_occurrence",
            [
                {
                    "occurrence_id": request.occurrence_id,
                    "owner_id": request.owner_id,
                    "fence": request.fence,
                    "succeeded": 1 if request.outcome == "succeeded" else 0,
                    "snoozed": 1 if request.outcome == "snoozed" else 0,
                    "max_snoozes": contract.MAX_SNOOZES,
                    "retryable": 1 if request.retryable and request.outcome == "failed" else 0,
                    "retry_available_at": (
                        now
                        if request.retry_at is None or request.retry_at < now
                        else request.retry_at
                    ),
                    "error_json": request.error_json,
                    "result_json": request.result_json,
                    "now": now,
                    "holder_live": 1 if request.owner_id in live else 0,
                }
                for request in requests
            ],
        )
        results: list[Occurrence | LeaseLost] = []
        events: list[dict[str, Any]] = []
        tally: Counter[tuple[int, str, str, str]] = Counter()
        settled = iter(self._occurrences(tx, [row for row in updated if row is not None]))
        freed: set[Lane] = set()
        for request, row in zip(requests, updated, strict=True):
            if row is None:
                # Fenced out: this one changed nothing, and must not undo the others.
                results.append(common.lease_lost(request.occurrence_id))
                continue
            at = int(row["updated_at"])
            event_type, data_json = common.settle_event(row, snoozed=request.outcome == "snoozed")
            events.append(
                common.event_params(
                    job_id=row["job_id"],
                    occurrence_id=request.occurrence_id,
                    event_type=event_type,
                    occurred_at=at,
                    owner_id=request.owner_id,
                    fence=request.fence,
                    data_json=data_json,
                )
            )
            if event_type != "occurrence_snoozed":  # a snooze is neither a retry nor an end
                common.count_settlement(tally, at, row, request.owner_id)
            if row["partition_key"] is not None:
                freed.add((row["queue"], row["partition_key"]))
            results.append(next(settled))
        if events:
            tx.run("insert_events", tx.table(events))
            tx.many("add_throughput", common.throughput_params(tally))
        self._slots_freed(tx, {row["queue"] for row in updated if row is not None})
        self._free_lanes(tx, now, freed)
        dependencies.decide_children(
            tx, now, [row for row in updated if row is not None], self.work_signal
        )
        return results

    def _free_lanes(self, tx: Tx, now: int, lanes: set[Lane]) -> None:
        """Slots of these partitions ended: admit their next held rows (only a queue that limits
        partitions holds any; reading the declarations costs nothing otherwise). Rows admitted
        are claimable now: the commit wakes the waiting workers.

        The declarations are read under the queues' shared locks (PostgreSQL), as a claim reads
        them: a re-declaration holds its queue's lock exclusively, so a settle can never admit
        rows by a partition limit that a concurrent tightening has just replaced (it would
        undo the tightening's regate and let the partition run past its new limit)."""
        if not lanes:
            return
        queues = sorted({queue for queue, _ in lanes})
        self._take_locks(tx, shared=[queue_lock(name) for name in queues], exclusive=())
        if Gate(tx, now, load_queues(tx), lock=self._take_locks).promote(lanes):
            tx.wake()

    @staticmethod
    def _slots_freed(tx: Tx, queues: set[str]) -> None:
        """Running occurrences of ``queues`` ended. A queue with a queue-wide ``concurrency``
        limit now has a free slot that a worker of any process may be waiting for, its last
        claim having found the queue full: the commit wakes them (SPEC §14), so the next
        occurrence starts now rather than at their next poll. (A worker's own free slots —
        ``worker_concurrency``, its claims for free slots only — wake its own feeder.)"""
        if queues and any(row["name"] in queues for row in tx.all("concurrency_limited_queues")):
            tx.wake()

    def settle(
        self,
        *,
        occurrence_id: str,
        owner_id: str,
        fence: int,
        outcome: Outcome,
        result: Any = None,
        error: Any = None,
        retryable: bool = True,
        retry_at: int | None = None,
    ) -> Occurrence:
        request = inputs.normalize_settle_request(
            occurrence_id=occurrence_id,
            owner_id=owner_id,
            fence=fence,
            outcome=outcome,
            result=result,
            error=error,
            retryable=retryable,
            retry_at=retry_at,
        )

        def body(tx: Tx) -> Occurrence:
            [settled] = self._settle_many(tx, tx.now(), [request])
            if isinstance(settled, LeaseLost):
                raise settled
            return settled

        occurrence = self._write(body)
        self._after_settle([occurrence.id])
        return occurrence

    def settle_batch(
        self, settlements: Sequence[Settlement], *, starts: Sequence[Renewal] = ()
    ) -> list[Occurrence | LeaseLost]:
        requests = inputs.normalize_settlements(settlements)
        marks = inputs.normalize_starts(starts, {request.occurrence_id for request in requests})
        if not requests and not marks:
            self._assert_open()
            return []

        def body(tx: Tx) -> list[Occurrence | LeaseLost]:
            now = tx.now()
            settled = self._settle_many(tx, now, requests) if requests else []
            marked = self._renew_many(tx, now, marks, started=True) if marks else []
            return [*settled, *marked]

        results = self._write(body)
        self._after_settle(r.id for r in results[: len(requests)] if isinstance(r, Occurrence))
        return results

    def start_batch(self, starts: Sequence[Renewal]) -> list[Occurrence | LeaseLost]:
        return self.settle_batch((), starts=starts)

    # -- giving leases up -------------------------------------------------------------------

    def release_lease(
        self, *, occurrence_id: str, owner_id: str, fence: int, reason: str
    ) -> Occurrence:
        key, owner, token = inputs.normalize_lease_holder(occurrence_id, owner_id, fence)
        why = contract.normalize_identifier(reason, "reason", max_length=128)

        def body(tx: Tx) -> Occurrence:
            now = tx.now()
            row = tx.one(
                "release_lease",
                {
                    "occurrence_id": key,
                    "owner_id": owner,
                    "fence": token,
                    "now": now,
                    "holder_live": 1 if self._held_owners({owner}) else 0,
                },
            )
            if row is None:
                raise common.lease_lost(key)
            released = self._occurrence(tx, row)
            if released.partition is not None:
                self._free_lanes(tx, now, {(released.queue, released.partition)})
            self._append_event(
                tx,
                job_id=released.job_id,
                occurrence_id=key,
                event_type="occurrence_released",
                occurred_at=released.updated_at,
                owner_id=owner,
                fence=token,
                data={"attempt": released.attempt, "reason": why},
            )
            return released

        occurrence = self._write(body)
        self._after_enqueue()
        return occurrence

    def expire_leases_of(self, owner_id: str, *, reason: str) -> list[Occurrence]:
        """End every live lease of ``owner_id`` now, because that owner is known to be gone.

        For a worker whose death is certain (its lock could be taken: the process or database
        session that held it is gone). A claim whose handler never began (``started_at``
        NULL: buffered ahead of a free slot) is given back at once, its attempt not spent
        (``occurrence_released`` ``{attempt, reason, started: false}``). For the others the
        next claim takes each occurrence over — or dead-letters it, if that was its final
        attempt or its outcome must be adjudicated — exactly as after a natural expiry; fences
        keep this safe even if the owner were still alive. Appends ``occurrence_lease_expired``
        with ``{reason}`` per lease. Returns the occurrences given back, then those expired.
        """
        owner = contract.normalize_identifier(owner_id, "ownerId")
        why = contract.normalize_identifier(reason, "reason", max_length=128)

        def body(tx: Tx) -> list[Occurrence]:
            now = tx.now()
            held = tx.all("running_of_owner", {"owner_id": owner})
            # Claims whose handler never began go back at once, their attempt not spent.
            given_back = self._give_back_unstarted(
                tx,
                now,
                [row for row in held if row["started_at"] is None],
                reason=why,
                expired=False,
            )
            lanes = {
                (row["queue"], row["partition_key"])
                for row in given_back
                if row["partition_key"] is not None
            }
            self._free_lanes(tx, now, lanes)
            updated = tx.rows_many(
                "expire_lease",
                [
                    {
                        "occurrence_id": row["occurrence_id"],
                        "owner_id": owner,
                        "fence": row["fence"],
                        "now": now,
                    }
                    for row in held
                    if row["started_at"] is not None
                ],
            )
            expired = self._occurrences(tx, [row for row in updated if row is not None])
            events = [
                common.event_params(
                    job_id=occurrence.job_id,
                    occurrence_id=occurrence.id,
                    event_type="occurrence_lease_expired",
                    occurred_at=occurrence.updated_at,
                    owner_id=owner,
                    fence=occurrence.fence,
                    data_json=contract.encode_trusted_json({"reason": why}),
                )
                for occurrence in expired
            ]
            if events:
                tx.run("insert_events", tx.table(events))
            return [*self._occurrences(tx, given_back), *expired]

        expired = self._write(body)
        if expired:
            self._after_enqueue()
        return expired

    # -- operator actions -------------------------------------------------------------------

    def cancel_occurrence(self, *, occurrence_id: str, actor: str, reason: str) -> Occurrence:
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        who, why = inputs.normalize_actor_reason(actor, reason)

        def body(tx: Tx) -> Occurrence:
            current = self._occurrence_row(tx, key)
            if current is None:
                raise NotFound(f"Scheduler occurrence does not exist: {key}")
            cancelled = self._cancel_in(tx, tx.now(), current, actor=who, reason=why)
            if cancelled is None:
                raise Conflict(
                    f"Occurrence {key} is {current['status']}: only queued, waiting or running "
                    "occurrences can be cancelled",
                    code="SCHEDULER_CANCEL_CONFLICT",
                    details={"status": current["status"]},
                )
            return cancelled

        occurrence = self._write(body)
        self._after_settle([occurrence.id])
        return occurrence

    def _cancel_in(
        self, tx: Tx, now: int, current: Row, *, actor: str, reason: str
    ) -> Occurrence | None:
        """Cancel the occurrence ``current`` (its row as read in ``tx``) inside ``tx``: a
        running one is cancelled cooperatively (its lease is void: the handler's next renew or
        settle is refused); frees its partition slot, decides its children and appends
        ``occurrence_cancelled``. ``None`` when its status cannot be cancelled."""
        key = current["occurrence_id"]
        error_json = contract.canonical_json(
            {"code": "cancelled", "message": reason, "actor": actor}, "error"
        )
        row = tx.one(
            "cancel_occurrence", {"occurrence_id": key, "error_json": error_json, "now": now}
        )
        if row is None:
            return None
        if current["status"] in ("running", "queued", "retry_wait") and row["partition_key"]:
            self._free_lanes(tx, now, {(row["queue"], row["partition_key"])})
        if current["status"] == "running":
            self._slots_freed(tx, {row["queue"]})
        # Descendants under "cancel" go with it, before it is read back for the caller.
        dependencies.decide_children(tx, now, [row], self.work_signal)
        cancelled = self._occurrence(tx, row)
        self._append_event(
            tx,
            job_id=cancelled.job_id,
            occurrence_id=key,
            event_type="occurrence_cancelled",
            occurred_at=cancelled.updated_at,
            owner_id=current["lease_owner"],
            fence=int(current["fence"]),
            data={
                "actor": actor,
                "reason": reason,
                "attempt": cancelled.attempt,
                "previousStatus": current["status"],
                "previousOwner": current["lease_owner"],
            },
        )
        return cancelled

    def requeue_dead_letter(
        self,
        *,
        occurrence_id: str,
        expected_fence: int,
        reason: str,
        actor: str,
        revive_children: bool = False,
        override_adjudication: bool = False,
    ) -> Occurrence:
        key, fence, why, who = inputs.normalize_requeue_args(
            occurrence_id=occurrence_id, expected_fence=expected_fence, reason=reason, actor=actor
        )
        revive = inputs.normalize_boolean(revive_children, "reviveChildren")
        override = inputs.normalize_boolean(override_adjudication, "overrideAdjudication")

        def body(tx: Tx) -> Occurrence:
            now = tx.now()
            current = self._occurrence_row(tx, key)
            if current is None:
                raise NotFound(f"Scheduler occurrence does not exist: {key}")
            if current["status"] != "dead_letter" or current["fence"] != fence:
                raise RequeueConflict(
                    "Dead-letter evidence changed: the occurrence is not a dead letter at the "
                    "expected fence",
                    details={
                        "status": current["status"],
                        "expectedFence": fence,
                        "actualFence": int(current["fence"]),
                    },
                )
            attempt = int(current["attempt"])
            if attempt >= contract.MAX_JOB_ATTEMPTS:
                raise RequeueConflict(
                    f"Occurrence already used {contract.MAX_JOB_ATTEMPTS} attempts, the most an "
                    "occurrence can have; enqueue a new occurrence instead",
                    code="SCHEDULER_REQUEUE_ATTEMPT_LIMIT",
                    details={"attempt": attempt, "maxAttempts": contract.MAX_JOB_ATTEMPTS},
                )
            undecided = awaits_adjudication(tx, current)
            if undecided and not override:
                raise RequeueConflict(
                    f"Occurrence {key} is an outcome-unknown dead letter: nobody knows whether "
                    f"its side effect happened. Decide it: `jobledger adjudicate decide {key} "
                    "not_applied|applied --reason ...` (not_applied runs it once more), or "
                    "requeue it with an explicit, audited override (--override-adjudication, "
                    "override_adjudication=True) if running it again is safe",
                    code="SCHEDULER_REQUEUE_NEEDS_ADJUDICATION",
                    details={"occurrenceId": key, "errorCode": error_code_of(current)},
                )
            # Stale for its job (a new kind or authority since it was enqueued, SPEC §14): the
            # operator asks for it to run as the job is now.
            job = rows.job_from_row(required(self._job_row(tx, current["job_id"])))
            bound_from = int(current["job_revision"])
            stale = not job.binds(bound_from)
            row = tx.one(
                "requeue_dead_letter",
                {"occurrence_id": key, "expected_fence": fence, "now": now},
            )
            if row is None:
                raise RequeueConflict("Dead letter changed during requeue")
            if stale:
                row = required(
                    tx.one(
                        "bind_occurrence_revision",
                        {"occurrence_id": key, "job_revision": job.revision},
                    )
                )
            revived = revive_descendants(tx, now, current, key, who) if revive else []
            requeued = self._occurrence(tx, row)
            record = tx.one(
                "insert_requeue",
                {
                    "occurrence_id": key,
                    "job_id": requeued.job_id,
                    "expected_fence": fence,
                    "attempt": attempt,
                    "previous_max_attempts": int(current["max_attempts"]),
                    "max_attempts": requeued.max_attempts,
                    "previous_error_json": current["last_error_json"],
                    "reason": why,
                    "actor": who,
                    "now": now,
                    "revived_children": 1 if revive else 0,
                },
            )
            assert record is not None
            extra: dict[str, Any] = {}
            if stale:
                extra["previousJobRevision"] = bound_from
                extra["jobRevision"] = job.revision
            if undecided:
                extra["overrideAdjudication"] = True
            if revive:
                extra["revived"] = revived
            self._append_event(
                tx,
                job_id=requeued.job_id,
                occurrence_id=key,
                event_type="occurrence_requeued",
                occurred_at=requeued.updated_at,
                fence=fence,
                data={
                    "actor": who,
                    "reason": why,
                    "requeueId": int(record["requeue_id"]),
                    "attempt": attempt,
                    "previousMaxAttempts": int(current["max_attempts"]),
                    "maxAttempts": requeued.max_attempts,
                    **extra,
                },
            )
            if extra:
                self._audit(
                    tx,
                    now=now,
                    action="occurrence_requeued",
                    actor=who,
                    subject=key,
                    data={"reason": why, "fence": fence, **extra},
                )
            return requeued

        occurrence = self._write(body)
        self._after_enqueue()
        return occurrence
