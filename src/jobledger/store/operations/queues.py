"""Queue declarations and pause (SPEC §7): limits in the store, operator actions audited.

``declare_queue`` replaces a queue's whole declaration (omitted limits become ``None``) and
rebalances its partitions: a raised or removed partition limit admits held rows at once. Pause
and resume take the queue's lock exclusively on PostgreSQL, so a pause returns only after every
claim of the queue in flight has committed, and every later claim sees it; on SQLite the single
writer does the same. Each change appends an audit record (``queue_updated``, ``queue_paused``,
``queue_resumed``) with its actor — operator actions, listed by ``jobledger audit``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ... import contract
from ...errors import InvalidArgument
from ...models import QUEUE_LIMIT_KEYS, Queue, Rate
from ...models.queues import normalize_declaration
from .. import inputs, rows
from ..tx import Row, Tx
from .admission import Gate, load_queues, queue_lock
from .base import OperationsBase, required

__all__ = ["QueueOperations"]


class QueueOperations(OperationsBase):
    """Queue declarations and pause (see the module docstring)."""

    def get_queue(self, name: str) -> Queue | None:
        self._assert_open()
        key = contract.normalize_queue_name(name, "name")
        row = self._read(lambda tx: tx.one("get_queue", {"name": key}))
        return None if row is None else rows.queue_from_row(row)

    def list_queues(self) -> list[Queue]:
        self._assert_open()
        return [rows.queue_from_row(row) for row in self._read(lambda tx: tx.all("list_queues"))]

    def declare_queue(
        self,
        declaration: Queue,
        *,
        actor: str,
        source: str = "declaration",
        fields: Collection[str] | None = None,
    ) -> Queue:
        if not isinstance(declaration, Queue):
            raise InvalidArgument("declaration must be a jobledger.Queue")
        source = inputs.normalize_source(source)
        given = _fields(fields)
        wanted = normalize_declaration(
            name=declaration.name,
            concurrency=declaration.concurrency,
            worker_concurrency=declaration.worker_concurrency,
            partition_concurrency=declaration.partition_concurrency,
            rate=declaration.rate,
            partition_rate=declaration.partition_rate,
        )
        who = contract.normalize_identifier(actor, "actor")

        def body(tx: Tx) -> Queue:
            now = tx.now()
            self._take_locks(tx, shared=(), exclusive=[queue_lock(wanted.name)])
            before = tx.one("get_queue", {"name": wanted.name})
            previous = None if before is None else rows.queue_from_row(before)
            plan = _plan(before, previous, wanted, source, given)
            if plan is None:
                assert previous is not None  # only a declaration seen before is unchanged
                return previous  # an unchanged declaration: nothing is written
            target, declared, operator = plan
            recorded = {
                "declared_json": None if declared is None else contract.canonical_json(declared),
                "operator_set_json": contract.canonical_json(sorted(operator)),
            }
            if previous is not None and _same_limits(previous, target):
                # The same limits: only where they came from may change (no revision, no audit).
                if before is not None and (
                    before["declared_json"] == recorded["declared_json"]
                    and before["operator_set_json"] == recorded["operator_set_json"]
                ):
                    return previous
                row = tx.one("record_queue_sources", {"name": wanted.name, **recorded})
                return rows.queue_from_row(required(row))
            stored = rows.queue_from_row(
                required(tx.one("declare_queue", {**_limit_params(target), **recorded, "now": now}))
            )
            tx.wake()  # changed limits (raised ones, say) may let held-back work start now
            self._audit(
                tx,
                now=now,
                action="queue_updated",
                actor=who,
                subject=wanted.name,
                data={
                    "queue": wanted.name,
                    "from": None if previous is None else _limits_json(previous),
                    "to": _limits_json(stored),
                    "source": source,
                },
            )
            # A first declaration tightens too: rows enqueued before it were made ready
            # without admission, and would otherwise run past the new partition limit.
            if _tighter_partitions(previous or Queue(name=wanted.name), stored):
                # Rows admitted under the old partition limits may be more than the new ones
                # allow: every partitioned row of the queue goes back through admission.
                tx.run("regate_ready_partitions", {"queue": wanted.name})
                tx.run("regate_held_partitions", {"queue": wanted.name})
            elif (
                previous is not None and previous.partition_limited and not stored.partition_limited
            ):
                # No limit holds its partitions any more: every held row is admitted now
                # (promotion only serves lanes a limit still governs).
                if tx.run("release_held_partitions", {"queue": wanted.name}):
                    released.append(wanted.name)
            elif previous is None or previous.partition_limited:
                # A raised partition limit: admit what the new limit allows now.
                partitions = [
                    row["partition_key"]
                    for row in tx.all("held_partitions", {"queue": wanted.name})
                ]
                if partitions:
                    Gate(tx, now, load_queues(tx), lock=self._take_locks).promote(
                        (wanted.name, partition) for partition in partitions
                    )
            return stored

        released: list[str] = []
        result = self._write(body)
        if released:
            self._after_enqueue()  # held work became claimable: wake idle workers
        return result

    def pause_queue(self, name: str, *, reason: str, actor: str) -> Queue:
        key = contract.normalize_queue_name(name, "name")
        who, why = inputs.normalize_actor_reason(actor, reason)

        def body(tx: Tx) -> Queue:
            now = tx.now()
            # Exclusive: waits for the claims of this queue in flight; later claims see it.
            self._take_locks(tx, shared=(), exclusive=[queue_lock(key)])
            stored = rows.queue_from_row(
                required(
                    tx.one("pause_queue", {"name": key, "reason": why, "actor": who, "now": now})
                )
            )
            self._audit(
                tx,
                now=now,
                action="queue_paused",
                actor=who,
                subject=key,
                data={"queue": key, "reason": why},
            )
            return stored

        return self._write(body)

    def resume_queue(self, name: str, *, actor: str) -> Queue:
        key = contract.normalize_queue_name(name, "name")
        who = contract.normalize_identifier(actor, "actor")

        def body(tx: Tx) -> Queue:
            now = tx.now()
            self._take_locks(tx, shared=(), exclusive=[queue_lock(key)])
            before = tx.one("get_queue", {"name": key})
            if before is None:
                return Queue(name=key)  # never declared, never paused: nothing to resume
            if not int(before["paused"]):
                return rows.queue_from_row(before)  # not paused: nothing changes, no record
            row = required(tx.one("resume_queue", {"name": key, "now": now}))
            tx.wake()  # every process's idle workers, not only this one's
            self._audit(
                tx, now=now, action="queue_resumed", actor=who, subject=key, data={"queue": key}
            )
            return rows.queue_from_row(row)

        result = self._write(body)
        self._after_enqueue()  # its queued work is claimable again: wake idle workers
        return result


_LIMIT_KEYS = tuple(QUEUE_LIMIT_KEYS.values())


def _fields(fields: Collection[str] | None) -> set[str]:
    """The limits an operator names (Python names), as their JSON keys; None: all of them."""
    if fields is None:
        return set(_LIMIT_KEYS)
    if (
        isinstance(fields, str)
        or not isinstance(fields, Collection)
        or not all(isinstance(name, str) and name in QUEUE_LIMIT_KEYS for name in fields)
    ):
        raise InvalidArgument(
            f"fields must name limits among {', '.join(QUEUE_LIMIT_KEYS)}",
            details={"field": "fields"},
        )
    return {QUEUE_LIMIT_KEYS[name] for name in fields}


def _plan(
    before: Row | None,
    previous: Queue | None,
    wanted: Queue,
    source: str,
    given: set[str],
) -> tuple[Queue, dict[str, Any] | None, set[str]] | None:
    """What a declaration writes (SPEC §14): the limits, the declaration recorded as last
    applied from code, and the limits an operator set; ``None`` when nothing changes.

    From code (``"declaration"``): the same declaration as last applied writes nothing, whatever
    an operator set since; a changed one applies the limits whose declared value changed and
    keeps the operator's values for the others. From an operator: the ``given`` limits take
    their new values and stand from then on.
    """
    declared = (
        None
        if before is None or before["declared_json"] is None
        else rows.read_stored_json(before["declared_json"], "queue declaration")
    )
    operator = (
        set()
        if before is None
        else set(rows.read_stored_json(before["operator_set_json"], "queue operator fields"))
    )
    current = _limits_json(previous or Queue(name=wanted.name))
    new = _limits_json(wanted)
    if source == "operator":
        merged = {**current, **{key: new[key] for key in given}}
        return _queue_from_limits(wanted.name, merged), declared, operator | given
    if declared == new:
        return None
    changed = {key for key in _LIMIT_KEYS if declared is None or declared.get(key) != new[key]}
    merged = {
        key: current[key] if key in operator and key not in changed else new[key]
        for key in _LIMIT_KEYS
    }
    return _queue_from_limits(wanted.name, merged), new, operator - changed


def _queue_from_limits(name: str, limits: dict[str, Any]) -> Queue:
    def rate(value: Any) -> Rate | None:
        return None if value is None else Rate.from_ms(int(value["limit"]), int(value["perMs"]))

    return Queue(
        name=name,
        concurrency=limits["concurrency"],
        worker_concurrency=limits["workerConcurrency"],
        partition_concurrency=limits["partitionConcurrency"],
        rate=rate(limits["rate"]),
        partition_rate=rate(limits["partitionRate"]),
    )


def _tighter_partitions(before: Queue, after: Queue) -> bool:
    """Does ``after`` admit fewer rows per partition than ``before`` could have admitted?"""

    def tighter(old: int | None, new: int | None) -> bool:
        return new is not None and (old is None or new < old)

    old_rate, new_rate = before.partition_rate, after.partition_rate
    if new_rate is not None and old_rate is not None:
        # Fewer claims per millisecond (compared without division).
        slower = new_rate.limit * old_rate.per_ms < old_rate.limit * new_rate.per_ms
    else:
        slower = new_rate is not None
    return tighter(before.partition_concurrency, after.partition_concurrency) or slower


def _same_limits(a: Queue, b: Queue) -> bool:
    return _limits_json(a) == _limits_json(b)


def _limits_json(queue: Queue) -> dict[str, Any]:
    return {
        "concurrency": queue.concurrency,
        "workerConcurrency": queue.worker_concurrency,
        "partitionConcurrency": queue.partition_concurrency,
        "rate": None if queue.rate is None else queue.rate.to_json(),
        "partitionRate": None if queue.partition_rate is None else queue.partition_rate.to_json(),
    }


def _limit_params(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "concurrency": queue.concurrency,
        "worker_concurrency": queue.worker_concurrency,
        "partition_concurrency": queue.partition_concurrency,
        "rate_limit": None if queue.rate is None else queue.rate.limit,
        "rate_per_ms": None if queue.rate is None else queue.rate.per_ms,
        "partition_rate_limit": (
            None if queue.partition_rate is None else queue.partition_rate.limit
        ),
        "partition_rate_per_ms": (
            None if queue.partition_rate is None else queue.partition_rate.per_ms
        ),
    }
