"""Enqueuing work (the App's enqueue methods)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import contract
from ..durations import choose_ms, epoch_ms_from
from ..errors import InvalidArgument
from ..models import UNSET, EnqueueRequest, Occurrence, ParentFailurePolicy

if TYPE_CHECKING:
    pass


from .base import MAX_KEY_LENGTH
from .transactions import TransactionMethods

__all__ = ["EnqueueMethods"]


class EnqueueMethods(TransactionMethods):
    """Enqueuing work (the App's enqueue methods)."""

    # -- enqueue -----------------------------------------------------------------------------

    def _instant(
        self,
        at: datetime | None,
        at_ms: int | None,
        delay: timedelta | None,
        delay_ms: int | None,
    ) -> int:
        given = [
            n
            for n, v in (("at", at), ("at_ms", at_ms), ("delay", delay), ("delay_ms", delay_ms))
            if v is not None
        ]
        if len(given) > 1:
            raise InvalidArgument(
                f"pass one of at, at_ms, delay, delay_ms (got {', '.join(given)})"
            )
        if at is not None:
            if not isinstance(at, datetime):
                raise InvalidArgument(
                    "at must be an aware datetime; pass at_ms=<epoch ms> for a number"
                )
            return epoch_ms_from(at, "at")
        if at_ms is not None:
            return contract.normalize_epoch_ms(at_ms, "at_ms")
        offset = choose_ms(delay, delay_ms, "delay", default_ms=0)
        assert offset is not None
        return self._now() + offset

    @staticmethod
    def _trigger_key(key: str | None) -> tuple[str, bool]:
        """The occurrence's trigger key and whether it is once-per-key (idempotent)."""
        if key is None:
            return f"enqueue:{uuid.uuid4().hex}", False
        text = contract.normalize_identifier(key, "key", max_length=MAX_KEY_LENGTH)
        return f"key:{text}", True

    def enqueue(
        self,
        job_id: str,
        *,
        payload: Any = UNSET,
        key: str | None = None,
        at: datetime | None = None,
        at_ms: int | None = None,
        delay: timedelta | None = None,
        delay_ms: int | None = None,
        queue: str | None = None,
        priority: int | None = None,
        partition: str | None = None,
        after: Sequence[Occurrence | str] | None = None,
        on_parent_failure: ParentFailurePolicy | None = None,
        tags: Sequence[str] | None = None,
        meta: Mapping[str, Any] | None = None,
        conn: object = None,
    ) -> Occurrence:
        """Enqueue a run of ``job_id``: now, at ``at`` (an aware datetime), or ``delay`` from now.

        Every call makes a new occurrence, unless ``key`` is given: an idempotency key (an order
        id, a request id) — the first call with a key makes the occurrence, every later call
        with the same key returns that same occurrence with ``deduplicated=True`` (and raises
        ``SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH`` if its payload differs). ``payload`` defaults
        to the job's. ``at_ms``/``delay_ms`` take epoch/duration milliseconds instead.
        ``queue``/``priority`` default to the job's, ``partition`` to none (SPEC §7); a reused
        key returns the first occurrence unchanged, whatever these say. ``after`` (occurrences
        or ids) makes it run only after those parents, ``on_parent_failure`` says what a failed
        parent does to it (SPEC §10, ``docs/flows.md``). ``tags`` (at most 16 short strings:
        letters, digits and ``_ - . : / = @ +``, e.g. ``["customer:21"]``) and ``meta`` (a JSON
        object of at most 4 KiB) are stored with the occurrence, shown by the CLI and the
        dashboard, and ``list_occurrences(tag=…)`` finds it by a tag; a reused key keeps the
        first enqueue's.

        ``conn`` writes the occurrence in the caller's open transaction instead of one of the
        store's (SPEC §8, ``docs/transactions.md``): it exists when that transaction commits.
        When the app traces (``docs/observability.md``) the call is a ``send <queue>`` span whose
        trace context the occurrence keeps, so its attempts join the caller's trace.
        """
        with self._tracing.send(job_id, queue) as sending:
            request = self._enqueue_request(
                job_id,
                payload=payload,
                key=key,
                at=at,
                at_ms=at_ms,
                delay=delay,
                delay_ms=delay_ms,
                queue=queue,
                priority=priority,
                partition=partition,
                after=after,
                on_parent_failure=on_parent_failure,
                tags=tags,
                meta=meta,
                trace_context=None if sending is None else sending.context,
            )
            if conn is not None:
                [occurrence] = self._enqueue_in_transaction(conn, [request])
            elif (
                request.once_per_trigger
                or request.after
                or request.on_parent_failure is not None
                or request.tags
                or request.meta is not None
            ):
                [occurrence] = self.store.enqueue_batch([request])
            else:
                occurrence = self.store.enqueue_occurrence(
                    job_id=job_id,
                    scheduled_for=request.scheduled_for,
                    trigger_key=request.trigger_key,
                    payload=payload,
                    queue=queue,
                    priority=priority,
                    partition=partition,
                    trace_context=request.trace_context,
                )
            if sending is not None:
                sending.sent([occurrence])
            return occurrence

    def _enqueue_request(
        self,
        job_id: str,
        *,
        payload: Any,
        key: str | None,
        at: datetime | None,
        at_ms: int | None,
        delay: timedelta | None,
        delay_ms: int | None,
        queue: str | None,
        priority: int | None,
        partition: str | None,
        after: Sequence[Occurrence | str] | None = None,
        on_parent_failure: ParentFailurePolicy | None = None,
        tags: Sequence[str] | None = None,
        meta: Mapping[str, Any] | None = None,
        trace_context: Mapping[str, str] | None = None,
    ) -> EnqueueRequest:
        """What :meth:`enqueue` asks the store for (its instant resolved, its key made)."""
        scheduled_for = self._instant(at, at_ms, delay, delay_ms)
        trigger_key, once = self._trigger_key(key)
        return EnqueueRequest(
            job_id=job_id,
            scheduled_for=scheduled_for,
            trigger_key=trigger_key,
            payload=payload,
            once_per_trigger=once,
            match_payload=once,
            queue=queue,
            priority=priority,
            partition=partition,
            after=_parent_ids(after),
            on_parent_failure=on_parent_failure,
            trace_context=trace_context,
            tags=() if tags is None else tags,
            meta=meta,
        )

    def enqueue_many(
        self,
        job_id: str,
        payloads: Iterable[Any],
        *,
        keys: Sequence[str] | None = None,
        at: datetime | None = None,
        at_ms: int | None = None,
        delay: timedelta | None = None,
        delay_ms: int | None = None,
        queue: str | None = None,
        priority: int | None = None,
        partitions: Sequence[str | None] | None = None,
        after: Sequence[Occurrence | str] | None = None,
        on_parent_failure: ParentFailurePolicy | None = None,
        tags: Sequence[str] | None = None,
        meta: Mapping[str, Any] | None = None,
        conn: object = None,
    ) -> list[Occurrence]:
        """Enqueue one occurrence per payload, all in one transaction (at most 10,000).

        The same rules as :meth:`enqueue` for each: a new occurrence per payload, or with
        ``keys`` (one per payload) the once-per-key rule. Pass ``jobledger.UNSET`` as a payload
        to use the job's own. ``queue``/``priority`` apply to all; ``partitions`` gives one
        partition (or ``None``) per payload. Either every occurrence is written, or none;
        with ``conn``, in the caller's open transaction (see :meth:`enqueue`).
        ``after``/``on_parent_failure``/``tags``/``meta`` as for :meth:`enqueue`, the same for
        each. Traced
        as one ``send <queue>`` span for the whole batch.
        """
        items = self._many_items(payloads, keys, partitions)
        with self._tracing.send(job_id, queue) as sending:
            requests = self._many_requests(
                job_id,
                items,
                keys=keys,
                at=at,
                at_ms=at_ms,
                delay=delay,
                delay_ms=delay_ms,
                queue=queue,
                priority=priority,
                partitions=partitions,
                after=after,
                on_parent_failure=on_parent_failure,
                tags=tags,
                meta=meta,
                trace_context=None if sending is None else sending.context,
            )
            if conn is not None:
                occurrences = self._enqueue_in_transaction(conn, requests)
            else:
                occurrences = self.store.enqueue_batch(requests)
            if sending is not None:
                sending.sent(occurrences)
            return occurrences

    @staticmethod
    def _many_items(
        payloads: Iterable[Any],
        keys: Sequence[str] | None,
        partitions: Sequence[str | None] | None,
    ) -> list[Any]:
        """``payloads`` as a list, checked with ``keys`` and ``partitions`` (one per payload)."""
        if isinstance(payloads, (str, bytes, Mapping)) or not isinstance(payloads, Iterable):
            raise InvalidArgument(
                "payloads must be a list of payloads", details={"field": "payloads"}
            )
        items = list(payloads)
        if keys is not None and (not isinstance(keys, (list, tuple)) or len(keys) != len(items)):
            raise InvalidArgument("keys must have one key per payload", details={"field": "keys"})
        if partitions is not None and (
            not isinstance(partitions, (list, tuple)) or len(partitions) != len(items)
        ):
            raise InvalidArgument(
                "partitions must have one partition (or None) per payload",
                details={"field": "partitions"},
            )
        if len(items) > contract.MAX_ENQUEUE_BATCH:
            raise InvalidArgument(
                f"enqueue_many takes at most {contract.MAX_ENQUEUE_BATCH} payloads per call",
                details={"count": len(items), "limit": contract.MAX_ENQUEUE_BATCH},
            )
        return items

    def _many_requests(
        self,
        job_id: str,
        items: list[Any],
        *,
        keys: Sequence[str] | None,
        at: datetime | None,
        at_ms: int | None,
        delay: timedelta | None,
        delay_ms: int | None,
        queue: str | None,
        priority: int | None,
        partitions: Sequence[str | None] | None,
        after: Sequence[Occurrence | str] | None,
        on_parent_failure: ParentFailurePolicy | None,
        trace_context: Mapping[str, str] | None,
        tags: Sequence[str] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> list[EnqueueRequest]:
        """What :meth:`enqueue_many` asks the store for, one request per item."""
        scheduled_for = self._instant(at, at_ms, delay, delay_ms)
        parents = _parent_ids(after)
        requests: list[EnqueueRequest] = []
        for index, payload in enumerate(items):
            trigger_key, once = self._trigger_key(None if keys is None else keys[index])
            requests.append(
                EnqueueRequest(
                    job_id=job_id,
                    scheduled_for=scheduled_for,
                    trigger_key=trigger_key,
                    payload=payload,
                    once_per_trigger=once,
                    match_payload=once,
                    queue=queue,
                    priority=priority,
                    partition=None if partitions is None else partitions[index],
                    after=parents,
                    on_parent_failure=on_parent_failure,
                    trace_context=trace_context,
                    tags=() if tags is None else tags,
                    meta=meta,
                )
            )
        return requests


def _parent_ids(after: Sequence[Occurrence | str] | None) -> tuple[str, ...]:
    """The occurrence ids of ``after`` (occurrences or ids; SPEC §10)."""
    if after is None:
        return ()
    if isinstance(after, (str, bytes, Occurrence)) or not isinstance(after, Iterable):
        raise InvalidArgument(
            "after must be a list of occurrences or occurrence ids", details={"field": "after"}
        )
    return tuple(parent.id if isinstance(parent, Occurrence) else parent for parent in after)
