"""The claim lane's gate: which queued rows a claim may see (schema v4, docs/schema.md).

Every queued or retrying occurrence has a ``gate``: **ready** (0: due, and admitted to its
partition), **waiting** (1: not due yet, or due but not yet admitted) or **held** (2: due, its
partition at its limit). Only ready rows are in the claim index, so a claim never walks past
work it may not take — a paused queue's backlog, a full partition's, a future one.

* **Staging** (:meth:`Gate.stage`, at the start of every claim): due waiting rows become ready,
  or go through admission when their queue limits partitions.
* **Admission** (:meth:`Gate.admit`): a partition admits rows while its running plus admitted
  rows stay under ``partition_concurrency`` and its rate window (``partition_rate``) has
  tokens; the rest are held, best first. A partition whose window ran out is woken at the next
  window (``jobledger_rate_windows.wake_at``).
* **Promotion** (:meth:`Gate.promote`): whatever frees a slot of a partition (a settle, a
  release, a cancellation, a dead letter, a raised limit) admits its next held rows.

On PostgreSQL every admission takes the partition's advisory lock (after the claim's queue
locks), so admissions of one partition never race; SQLite's single writer does the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from ...models import Queue
from .. import rows
from ..tx import Row, Tx

__all__ = ["STAGE_BATCH", "Gate", "Lane", "lane_lock", "load_queues", "owner_lock", "queue_lock"]

# How many due waiting rows one claim stages: at least a claim batch, so rows that became due
# together are all ordered by priority before the next claim looks.
STAGE_BATCH: Final = 1000
# How many partitions whose rate window reopened one claim wakes.
WAKE_BATCH: Final = 100
READY, WAITING, HELD = 0, 1, 2

Lane = tuple[str, str]  # (queue, partition)
Lock = Callable[..., None]


def queue_lock(queue: str) -> str:
    return f"q\0{queue}"


def owner_lock(queue: str, owner: str) -> str:
    return f"w\0{queue}\0{owner}"


def lane_lock(lane: Lane) -> str:
    return f"l\0{lane[0]}\0{lane[1]}"


def load_queues(tx: Tx) -> dict[str, Queue]:
    """Every declared queue (a small table: declarations, not work)."""
    return {row["name"]: rows.queue_from_row(row) for row in tx.all("list_queues")}


class Gate:
    """Staging, admission and promotion inside one write transaction (module docstring)."""

    def __init__(self, tx: Tx, now: int, queues: Mapping[str, Queue], *, lock: Lock) -> None:
        self._tx = tx
        self._now = now
        self._queues = queues
        self._lock = lock
        self._locked: set[str] = set()

    def _partition_limited(self, queue: str) -> Queue | None:
        declared = self._queues.get(queue)
        return declared if declared is not None and declared.partition_limited else None

    def _lock_lanes(self, lanes: Iterable[Lane]) -> None:
        names = sorted({lane_lock(lane) for lane in lanes} - self._locked)
        if names:
            self._lock(self._tx, shared=(), exclusive=names)
            self._locked.update(names)

    # -- staging ----------------------------------------------------------------------------

    def stage(
        self, waiting: Sequence[Row], wakes: Sequence[Row], freed: Iterable[Lane] = ()
    ) -> bool:
        """Move due waiting rows to ready (or through admission); admit the held rows of
        partitions whose rate window reopened, and of ``freed`` ones (a slot ended). Every
        partition lock is taken at once, in one order, so two claims never wait on each other.
        Returns whether anything may have become ready."""
        plain: list[int] = []
        by_lane: dict[Lane, list[int]] = defaultdict(list)
        for row in waiting:
            partition = row["partition_key"]
            if partition is not None and self._partition_limited(row["queue"]) is not None:
                by_lane[(row["queue"], partition)].append(int(row["seq"]))
            else:
                plain.append(int(row["seq"]))
        if plain:
            self._set(plain, READY)
        woken = [(row["queue"], row["partition_key"]) for row in wakes]
        for lane in woken:
            self._tx.run("clear_rate_wake", {"queue": lane[0], "partition_key": lane[1]})
        lanes = sorted(
            set(by_lane)
            | {lane for lane in woken if lane[1] != ""}
            | {lane for lane in freed if lane[1] is not None}
        )
        lanes = [lane for lane in lanes if self._partition_limited(lane[0]) is not None]
        self._lock_lanes(lanes)
        for lane in lanes:
            self._admit(lane, by_lane.get(lane, []))
        return bool(plain or lanes)

    def _set(self, seqs: Sequence[int], gate: int) -> None:
        self._tx.run("set_gate", {"gate": gate, "ids": self._tx.id_list(list(seqs))})

    # -- admission and promotion ------------------------------------------------------------

    def promote(self, lanes: Iterable[Lane]) -> int:
        """A slot of each of these partitions may have freed: admit their best held rows.
        Returns how many rows became ready."""
        limited = sorted(
            {
                lane
                for lane in lanes
                if lane[1] is not None and self._partition_limited(lane[0]) is not None
            }
        )
        self._lock_lanes(limited)
        return sum(self._admit(lane, []) for lane in limited)

    def _admit(self, lane: Lane, staged: Sequence[int]) -> int:
        """Admit as many of ``staged`` and the lane's held rows as it has room for, best first;
        hold the rest of ``staged``. Returns how many rows became ready."""
        declared = self._partition_limited(lane[0])
        if declared is None:  # the limit was removed meanwhile: nothing holds this lane
            if staged:
                self._set(staged, READY)
            return len(staged) + self._release_held(lane, None)
        room, tokens_left = self._room(lane, declared)
        if staged:
            # Staged rows compete with held ones by claim order: hold them all first, then admit
            # the best of the whole lane.
            self._set(staged, HELD)
        admitted = self._release_held(lane, room)
        if declared.partition_rate is not None:
            if admitted:
                self._take_tokens(lane, declared, admitted)
            if tokens_left - admitted <= 0:
                # The window is used up: held rows wait for the next one, when staging wakes
                # the lane (an empty lane's wake-up costs one probe).
                self._sleep_until_next_window(lane, declared)
        return admitted

    def _release_held(self, lane: Lane, room: int | None) -> int:
        """Make up to ``room`` (``None``: every) held rows of the lane ready; return how many."""
        if room is not None and room <= 0:
            return 0
        best = self._tx.all(
            "best_held",
            {
                "queue": lane[0],
                "partition_key": lane[1],
                "limit": 1_000_000 if room is None else room,
            },
        )
        seqs = [int(row["seq"]) for row in best]
        if seqs:
            self._set(seqs, READY)
        return len(seqs)

    def _room(self, lane: Lane, declared: Queue) -> tuple[int, int]:
        """How many more rows the lane may admit now, and how many rate tokens its window has
        left (a large number without a partition rate)."""
        room = 1_000_000
        cap = declared.partition_concurrency
        if cap is not None:
            found = self._tx.one(
                "count_lane_occupancy",
                {"queue": lane[0], "partition_key": lane[1], "cap": cap},
            )
            room = cap - int(found["n"] if found is not None else 0)
        tokens_left = 1_000_000
        rate = declared.partition_rate
        if rate is not None:
            tokens_left = rate.limit - self._window_claims(lane, rate.per_ms)
        return max(0, min(room, tokens_left)), tokens_left

    def _window_claims(self, lane: Lane, per_ms: int) -> int:
        window = self._tx.one("get_rate_window", {"queue": lane[0], "partition_key": lane[1]})
        start = self._now - self._now % per_ms
        if window is None or int(window["window_start"]) != start:
            return 0
        return int(window["claims"])

    def _take_tokens(self, lane: Lane, declared: Queue, n: int) -> None:
        rate = declared.partition_rate
        assert rate is not None
        self._tx.run(
            "take_rate_tokens",
            {
                "queue": lane[0],
                "partition_key": lane[1],
                "window_start": self._now - self._now % rate.per_ms,
                "n": n,
            },
        )

    def _sleep_until_next_window(self, lane: Lane, declared: Queue) -> None:
        rate = declared.partition_rate
        assert rate is not None
        start = self._now - self._now % rate.per_ms
        self._tx.run(
            "set_rate_wake",
            {
                "queue": lane[0],
                "partition_key": lane[1],
                "window_start": start,
                "wake_at": start + rate.per_ms,
            },
        )
