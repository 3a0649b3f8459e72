"""Claims: the work a worker may take now, leased in one transaction (SPEC §7, schema v4).

A claim batch, in one write transaction:

1. **lanes** — the (queue, kind) lanes it may take from: the ones asked for, or those the claim
   index holds (a skip scan, one probe per lane, never a scan of rows);
2. **locks** (PostgreSQL) — each queue's advisory lock, shared, or exclusive for a queue with a
   ``concurrency`` or ``rate`` limit (and a ``worker_concurrency`` lock per owner), so limits and
   pauses hold under any interleaving; then the declarations are read;
3. **expired leases** — a claim whose handler never began (``started_at`` NULL) is given back
   (no attempt spent) and staged; of the started ones, final attempts and outcome-unknown ones
   become dead letters (the lazy sweep), the others are reclaim candidates;
4. **staging** — due waiting rows become ready, through admission for partition-limited queues
   (:mod:`.admission`);
5. **room** — per queue: none while paused; else the room its limits leave (bounded counts);
6. **probe** — the ready rows of each lane with room, in claim order (priority descending, due
   instant, slot, occurrence id), merged with the reclaims and picked within each queue's room;
7. **lease** — one guarded ``UPDATE … RETURNING``, rate tokens, one multi-row event insert.

A claim's cost depends on the lanes it looks at and the rows it takes, not on the backlog of a
paused queue, a full partition, lower priorities or future work (none of it is in the index).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from ... import contract
from ...errors import InvalidArgument, NotFound
from ...models import Job, Occurrence, Queue
from .. import common, inputs, rows
from ..tx import Row, Tx
from . import dependencies
from .admission import (
    STAGE_BATCH,
    WAKE_BATCH,
    Gate,
    Lane,
    load_queues,
    owner_lock,
    queue_lock,
)
from .base import OperationsBase

__all__ = ["OUTCOME_UNKNOWN_ERROR_JSON", "ClaimOperations"]

# The most expired leases one claim looks at (reclaims, and the sweep into dead letters).
EXPIRED_BATCH: Final = 1000
# A cross product of queues and kinds larger than this is looked up in the index instead.
MAX_NAMED_LANES: Final = 64
UNLIMITED: Final = 1_000_000
# The most claim transactions one claim call runs while each only staged a full batch of held
# rows (a partition's backlog at its limit, due before other work): 50,000 rows at most.
MAX_STAGE_ROUNDS: Final = 50
OUTCOME_UNKNOWN_ERROR_JSON: Final = contract.canonical_json(
    {
        "code": "SCHEDULER_OUTCOME_UNKNOWN",
        "message": (
            "The worker running this attempt was lost; whether its side effects happened is "
            "unknown, so it waits for an operator's decision instead of running again"
        ),
        "name": "OutcomeUnknown",
    },
    "error",
)


@dataclass(slots=True)
class _Room:
    """What a queue still allows this claim (counts fall as rows are picked)."""

    start: int  # first claims: bounded by concurrency
    owner: int  # first claims and reclaims: bounded by worker_concurrency
    rate: int  # first claims and reclaims: bounded by the rate window
    taken: int = 0

    def for_first(self) -> int:
        return min(self.start, self.owner, self.rate)

    def for_reclaim(self) -> int:
        return min(self.owner, self.rate)


@dataclass(slots=True)
class _Staged:
    """One claim transaction's leases; ``more``: it staged a full batch of due rows and took
    nothing, so due rows may still wait behind them."""

    claimed: list[Occurrence]
    more: bool = False


class ClaimOperations(OperationsBase):
    """Claims: batched claims, targeted claims and the lazy final-lease sweep."""

    # -- the lazy sweep -----------------------------------------------------------------------

    def _end_expired_leases(
        self, tx: Tx, now: int, expired: Sequence[Row]
    ) -> tuple[set[Lane], list[Row]]:
        """Give back the expired claims whose handler never began; dead-letter the started ones
        whose final attempt's lease expired, and those whose lost lease must be adjudicated
        (outcome unknown). Returns the partitions they freed and the rows given back (waiting
        rows now, for the caller to stage)."""
        given_back = self._give_back_unstarted(
            tx, now, [row for row in expired if row["started_at"] is None], reason="lease_expired"
        )
        ending = [
            row
            for row in expired
            if row["started_at"] is not None
            and (int(row["attempt"]) >= int(row["max_attempts"]) or int(row["adjudicate"]))
        ]
        events: list[dict[str, Any]] = []
        tally: Counter[tuple[int, str, str, str]] = Counter()
        freed: set[Lane] = {
            (row["queue"], row["partition_key"])
            for row in given_back
            if row["partition_key"] is not None
        }
        ended: list[dict[str, Any]] = []
        for row in ending:
            unknown = bool(row["adjudicate"])
            changed = tx.one(
                "dead_letter_expired_lease",
                {
                    "occurrence_id": row["occurrence_id"],
                    "owner_id": row["lease_owner"],
                    "fence": row["fence"],
                    "error_json": (
                        OUTCOME_UNKNOWN_ERROR_JSON if unknown else common.LEASE_EXPIRED_ERROR_JSON
                    ),
                    "now": now,
                },
            )
            if changed is None:
                continue
            ended.append(
                {
                    "seq": row["seq"],
                    "occurrence_id": row["occurrence_id"],
                    "status": "dead_letter",
                    "last_error_json": (
                        OUTCOME_UNKNOWN_ERROR_JSON if unknown else common.LEASE_EXPIRED_ERROR_JSON
                    ),
                }
            )
            at = int(changed["updated_at"])
            tally[(common.minute_of(at), row["kind"], row["lease_owner"], "dead_letter")] += 1
            if row["partition_key"] is not None:
                freed.add((row["queue"], row["partition_key"]))
            data: dict[str, Any] = {
                "attempt": int(row["attempt"]),
                "maxAttempts": int(row["max_attempts"]),
                "reason": "outcome_unknown" if unknown else "lease_expired",
            }
            events.append(
                common.event_params(
                    job_id=row["job_id"],
                    occurrence_id=row["occurrence_id"],
                    event_type="occurrence_dead_lettered",
                    occurred_at=at,
                    owner_id=row["lease_owner"],
                    fence=int(row["fence"]),
                    data_json=contract.encode_trusted_json(data),
                )
            )
        if events:
            tx.run("insert_events", tx.table(events))
            tx.many("add_throughput", common.throughput_params(tally))
        # Dead letters decide their blocked children (an outcome-unknown one decides nothing).
        dependencies.decide_children(tx, now, ended, self.work_signal)
        return freed, given_back

    # -- planning a claim ---------------------------------------------------------------------

    def _lanes(
        self,
        tx: Tx,
        *,
        kinds: Sequence[str] | None,
        queues: Sequence[str] | None,
        workspace: str | None,
    ) -> list[tuple[str, str]]:
        """The (queue, kind) lanes to probe: the ones named, or those with ready rows."""
        if kinds is not None and queues is not None and len(kinds) * len(queues) <= MAX_NAMED_LANES:
            return [(queue, kind) for queue in sorted(queues) for kind in sorted(kinds)]
        if workspace is None:
            found = tx.all("ready_lanes")
        else:
            found = tx.all("ready_lanes_in_workspace", {"workspace_id": workspace})
        wanted_kinds = None if kinds is None else set(kinds)
        wanted_queues = None if queues is None else set(queues)
        return [
            (row["queue"], row["kind"])
            for row in found
            if (wanted_kinds is None or row["kind"] in wanted_kinds)
            and (wanted_queues is None or row["queue"] in wanted_queues)
        ]

    def _lock_queues(
        self, tx: Tx, names: Collection[str], declared: Mapping[str, Queue], owner: str
    ) -> None:
        """Advisory locks (PostgreSQL) in one fixed order: queues (exclusive where a queue-wide
        limit is counted), then (queue, owner) pairs with a worker limit."""
        exclusive = sorted(
            name
            for name in names
            if (queue := declared.get(name)) is not None
            and (queue.concurrency is not None or queue.rate is not None)
        )
        shared = sorted(set(names) - set(exclusive))
        self._take_locks(
            tx,
            shared=[queue_lock(name) for name in shared],
            exclusive=[queue_lock(name) for name in exclusive]
            + [
                owner_lock(name, owner)
                for name in sorted(names)
                if (queue := declared.get(name)) is not None
                and queue.worker_concurrency is not None
            ],
        )

    def _room(self, tx: Tx, now: int, declared: Queue | None, queue: str, owner: str) -> _Room:
        if declared is None:
            return _Room(UNLIMITED, UNLIMITED, UNLIMITED)
        if declared.paused:
            return _Room(0, 0, 0)
        start = owner_room = rate_room = UNLIMITED
        if declared.concurrency is not None:
            start = declared.concurrency - self._count(
                tx, "count_running_in_queue", {"queue": queue}, declared.concurrency
            )
        if declared.worker_concurrency is not None:
            owner_room = declared.worker_concurrency - self._count(
                tx,
                "count_running_of_owner_in_queue",
                {"queue": queue, "owner_id": owner},
                declared.worker_concurrency,
            )
        if declared.rate is not None:
            window = tx.one("get_rate_window", {"queue": queue, "partition_key": ""})
            start_of_window = now - now % declared.rate.per_ms
            used = (
                int(window["claims"])
                if window is not None and int(window["window_start"]) == start_of_window
                else 0
            )
            rate_room = declared.rate.limit - used
        return _Room(max(0, start), max(0, owner_room), max(0, rate_room))

    @staticmethod
    def _count(tx: Tx, query: str, params: dict[str, Any], cap: int) -> int:
        found = tx.one(query, {**params, "cap": cap})
        return 0 if found is None else int(found["n"])

    # -- one claim transaction ----------------------------------------------------------------

    def _claim(
        self,
        tx: Tx,
        now: int,
        *,
        owner: str,
        lease: int,
        kinds: Sequence[str] | None,
        queues: Sequence[str] | None,
        workspace: str | None,
        limit: int,
        limited: int | None = None,
        start: int | None = None,
    ) -> _Staged:
        """One claim transaction's body (see the module docstring). ``limited``: at most this
        many rows from queues with any limit (a worker's free slots: no prefetch from them);
        ``start``: how many of the rows taken (the first, in claim order) start their handlers at
        once and are marked started (``None``: all)."""
        lanes = self._lanes(tx, kinds=kinds, queues=queues, workspace=workspace)
        # A live owner's expired lease is left to it (SQLite: a clock step forward; see
        # OperationsBase._without_live_leases): neither reclaimed nor swept.
        expired = self._without_live_leases(
            tx.all("expired_leases", {"now": now, "limit": EXPIRED_BATCH})
        )
        waiting = list(tx.all("waiting_due", {"now": now, "limit": STAGE_BATCH}))
        wakes = tx.all("due_rate_wakes", {"now": now, "limit": WAKE_BATCH})
        wanted_kinds = None if kinds is None else set(kinds)
        wanted_queues = None if queues is None else set(queues)
        reclaimable = [
            row
            for row in expired
            if row["started_at"] is not None
            and int(row["attempt"]) < int(row["max_attempts"])
            and not int(row["adjudicate"])
            and int(row["runnable"])
            and (wanted_kinds is None or row["kind"] in wanted_kinds)
            and (wanted_queues is None or row["queue"] in wanted_queues)
            and (workspace is None or row["workspace_id"] == workspace)
        ]
        # Every queue this claim may take from or change (staging, the sweep's freed
        # partitions) is locked at once, in one order: what staging makes ready below is in
        # one of them.
        touched = (
            {queue for queue, _ in lanes}
            | {row["queue"] for row in itertools.chain(waiting, wakes, expired)}
            | set(queues or ())
        )
        self._lock_queues(tx, touched, load_queues(tx), owner)
        # After the locks: "now" may have moved while this claim waited for a limited queue's
        # lock (PostgreSQL's clock is read when the transaction begins); rate windows and leases
        # count from when the claim may act.
        now = max(now, tx.now())
        declared = load_queues(tx)  # read after the locks: a pause that returned is seen
        gate = Gate(tx, now, declared, lock=self._take_locks)
        freed, given_back = self._end_expired_leases(tx, now, expired)
        if gate.stage([*waiting, *given_back], wakes, freed):
            lanes = self._lanes(tx, kinds=kinds, queues=queues, workspace=workspace)
            late = {queue for queue, _ in lanes} - touched
            if late:  # not expected (see above), but never claim from an unlocked queue
                lanes = [lane for lane in lanes if lane[0] not in late]
        claim_queues = {queue for queue, _ in lanes} | {row["queue"] for row in reclaimable}
        rooms = {
            queue: self._room(tx, now, declared.get(queue), queue, owner) for queue in claim_queues
        }
        probe = [
            (queue, kind, min(limit, rooms[queue].for_first()))
            for queue, kind in lanes
            if rooms[queue].for_first() > 0
        ]
        ready = self._probe_ready(tx, now=now, lanes=probe, workspace=workspace) if probe else []
        picked = self._pick(ready, reclaimable, rooms, declared, limit=limit, limited=limited)
        if not picked:
            # Due rows may wait behind the batch this claim staged (all held, say): the caller
            # claims again in a new transaction rather than report nothing claimable.
            return _Staged([], more=len(waiting) >= STAGE_BATCH)
        return _Staged(
            self._lease(tx, now, picked, owner=owner, lease=lease, declared=declared, start=start)
        )

    @staticmethod
    def _pick(
        ready: Sequence[Row],
        reclaims: Sequence[Row],
        rooms: Mapping[str, _Room],
        declared: Mapping[str, Queue],
        *,
        limit: int,
        limited: int | None,
    ) -> list[Row]:
        """Reclaims and ready rows merged in claim order, taken while their queue has room."""
        candidates = [(row, False) for row in ready] + [(row, True) for row in reclaims]
        candidates.sort(
            key=lambda pair: (
                -int(pair[0]["priority"]),
                pair[0]["lease_expires_at"] if pair[1] else pair[0]["due_at"],
                pair[0]["scheduled_for"],
                # the reference's last tie-break: the id, compared as bytes (SQLite's BINARY,
                # PostgreSQL's COLLATE "C"); ids are ASCII, so str order is byte order
                pair[0]["occurrence_id"],
            )
        )
        picked: list[Row] = []
        from_limited = 0
        for row, reclaim in candidates:
            if len(picked) >= limit:
                break
            queue = row["queue"]
            room = rooms[queue]
            is_limited = queue in declared and declared[queue].limited
            if is_limited and limited is not None and from_limited >= limited:
                continue
            if (room.for_reclaim() if reclaim else room.for_first()) <= 0:
                continue
            if not reclaim:
                room.start -= 1
            room.owner -= 1
            room.rate -= 1
            room.taken += 1
            from_limited += 1 if is_limited else 0
            picked.append(row)
        return picked

    def _lease(
        self,
        tx: Tx,
        now: int,
        picked: Sequence[Row],
        *,
        owner: str,
        lease: int,
        declared: Mapping[str, Queue],
        targeted: bool = False,
        start: int | None = None,
    ) -> list[Occurrence]:
        seqs = [int(row["seq"]) for row in picked]
        leased = tx.all(
            "apply_claims",
            {
                "ids": tx.id_list(seqs),
                # Their handlers start at once: marked started in the claim itself.
                "starts": tx.id_list(seqs if start is None else seqs[:start]),
                "owner_id": owner,
                "lease_ms": common.checked_lease(now, lease),
                "now": now,
            },
        )
        by_seq = {int(row["seq"]): row for row in leased}
        taken = Counter(row["queue"] for row in leased)
        for queue, n in sorted(taken.items()):
            rate = declared[queue].rate if queue in declared else None
            if rate is not None:
                tx.run(
                    "take_rate_tokens",
                    {
                        "queue": queue,
                        "partition_key": "",
                        "window_start": now - now % rate.per_ms,
                        "n": n,
                    },
                )
        jobs: dict[str, Job | None] = {}
        claimed: list[Occurrence] = []
        events: list[dict[str, Any]] = []
        kept = [(before, by_seq[seq]) for before in picked if (seq := int(before["seq"])) in by_seq]
        occurrences = self._occurrences(tx, [row for _, row in kept])
        for (before, row), plain in zip(kept, occurrences, strict=True):
            job_id = row["job_id"]
            if job_id not in jobs:
                job_row = self._job_row(tx, job_id)
                jobs[job_id] = None if job_row is None else rows.job_from_row(job_row)
            reclaimed = before["status"] == "running"
            occurrence = replace(plain, job=jobs[job_id], reclaimed=reclaimed)
            event_type, data_json = common.claim_event_data(
                attempt=occurrence.attempt,
                previous_status=before["status"],
                previous_owner=before["lease_owner"],
                targeted=targeted,
            )
            events.append(
                common.event_params(
                    job_id=job_id,
                    occurrence_id=occurrence.id,
                    event_type=event_type,
                    occurred_at=int(row["updated_at"]),
                    owner_id=owner,
                    fence=occurrence.fence,
                    data_json=data_json,
                )
            )
            claimed.append(occurrence)
        if events:
            tx.run("insert_events", tx.table(events))
        return claimed

    # -- the public operations ----------------------------------------------------------------

    def claim_next(
        self,
        *,
        owner_id: str,
        lease_ms: int,
        job_kind: str | None = None,
        workspace_id: str | None = None,
        kinds: Collection[str] | None = None,
        queues: Collection[str] | None = None,
    ) -> Occurrence | None:
        owner = contract.normalize_identifier(owner_id, "ownerId")
        lease = contract.normalize_lease_ms(lease_ms)
        wanted = inputs.normalize_kinds(job_kind, kinds)
        wanted_queues = inputs.normalize_queues(queues)
        workspace = inputs.normalize_optional_identifier(workspace_id, "workspaceId")

        def body(tx: Tx) -> _Staged:
            return self._claim(
                tx,
                tx.now(),
                owner=owner,
                lease=lease,
                kinds=wanted,
                queues=wanted_queues,
                workspace=workspace,
                limit=1,
            )

        claimed = self._claim_rounds(body)
        return claimed[0] if claimed else None

    def claim_batch(
        self,
        *,
        owner_id: str,
        lease_ms: int,
        limit: int,
        job_kind: str | None = None,
        workspace_id: str | None = None,
        kinds: Collection[str] | None = None,
        queues: Collection[str] | None = None,
        limited: int | None = None,
        start: int | None = None,
    ) -> list[Occurrence]:
        owner = contract.normalize_identifier(owner_id, "ownerId")
        lease = contract.normalize_lease_ms(lease_ms)
        count = inputs.normalize_batch_limit(limit)
        wanted = inputs.normalize_kinds(job_kind, kinds)
        wanted_queues = inputs.normalize_queues(queues)
        workspace = inputs.normalize_optional_identifier(workspace_id, "workspaceId")
        if limited is not None and (type(limited) is not int or not 0 <= limited <= count):
            raise InvalidArgument(
                "limited must be an integer between 0 and limit", details={"field": "limited"}
            )
        if start is not None and (type(start) is not int or not 0 <= start <= count):
            raise InvalidArgument(
                "start must be an integer between 0 and limit", details={"field": "start"}
            )
        return self._claim_rounds(
            lambda tx: self._claim(
                tx,
                tx.now(),
                owner=owner,
                lease=lease,
                kinds=wanted,
                queues=wanted_queues,
                workspace=workspace,
                limit=count,
                limited=limited,
                start=start,
            )
        )

    def _claim_rounds(self, body: Callable[[Tx], _Staged]) -> list[Occurrence]:
        """Claim transactions until one leases something or staging has nothing left behind
        it (at most :data:`MAX_STAGE_ROUNDS`): each stages at most :data:`STAGE_BATCH` due rows,
        and in its own transaction, so its locks are taken in one order as always."""
        for _ in range(MAX_STAGE_ROUNDS):
            staged = self._write(body)
            if staged.claimed or not staged.more:
                return staged.claimed
        return []

    def claim_occurrence(
        self, *, occurrence_id: str, owner_id: str, lease_ms: int
    ) -> Occurrence | None:
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        owner = contract.normalize_identifier(owner_id, "ownerId")
        lease = contract.normalize_lease_ms(lease_ms)

        def body(tx: Tx) -> Occurrence | None:
            now = tx.now()
            row = tx.one("claim_target", {"occurrence_id": key})
            if row is None:
                raise NotFound(f"Scheduler occurrence does not exist: {key}")
            # The lazy sweep first, as for every claim: an expired final (or outcome-unknown)
            # attempt becomes a dead letter, this one included.
            expired = self._without_live_leases(
                tx.all("expired_leases", {"now": now, "limit": EXPIRED_BATCH})
            )
            queue = row["queue"]
            # The sweep's queues are locked with the target's before their limits are read.
            touched = {queue} | {expired_row["queue"] for expired_row in expired}
            self._lock_queues(tx, touched, load_queues(tx), owner)
            declared = load_queues(tx)
            freed, given_back = self._end_expired_leases(tx, now, expired)
            if freed or given_back:
                Gate(tx, now, declared, lock=self._take_locks).stage(given_back, [], freed)
            if any(expired_row["occurrence_id"] == key for expired_row in expired):
                row = tx.one("claim_target", {"occurrence_id": key})
                if row is None:
                    return None
            if not int(row["enabled"]) or int(row["attempt"]) >= int(row["max_attempts"]):
                return None
            room = self._room(tx, now, declared.get(queue), queue, owner)
            if row["status"] == "running":
                if int(row["lease_expires_at"]) > now or int(row["adjudicate"]):
                    return None
                if not self._without_live_leases([row]):
                    return None  # its owner lives and may still renew it
                if room.for_reclaim() <= 0:
                    return None
            elif row["status"] in ("queued", "retry_wait"):
                if int(row["available_at"]) > now or room.for_first() <= 0:
                    return None
                if int(row["gate"]) != 0:
                    gate = Gate(tx, now, declared, lock=self._take_locks)
                    gate.stage([row], [])
                    staged = tx.one("occurrence_lane", {"occurrence_id": key})
                    if staged is None or int(staged["gate"]) != 0:
                        return None  # held: its partition is at its limit
            else:
                return None
            claimed = self._lease(
                tx, now, [row], owner=owner, lease=lease, declared=declared, targeted=True
            )
            return claimed[0] if claimed else None

        return self._write(body)
