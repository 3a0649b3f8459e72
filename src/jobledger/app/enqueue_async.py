"""Enqueuing from async code (``await app.enqueue_async(...)``)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..models import UNSET, Occurrence, ParentFailurePolicy
from .enqueue import EnqueueMethods

__all__ = ["AsyncEnqueueMethods"]


class AsyncEnqueueMethods(EnqueueMethods):
    """Enqueuing from async code."""

    async def enqueue_async(
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
        """:meth:`enqueue` for async code: the same options and rules, without blocking the
        event loop. ``conn`` is the caller's open async transaction — a psycopg
        ``AsyncConnection`` or a SQLAlchemy ``AsyncSession``/``AsyncConnection`` on psycopg
        (SPEC §8); without it the store's own transaction runs in a worker thread."""
        options: dict[str, Any] = {
            "payload": payload,
            "key": key,
            "at": at,
            "at_ms": at_ms,
            "delay": delay,
            "delay_ms": delay_ms,
            "queue": queue,
            "priority": priority,
            "partition": partition,
            "after": after,
            "on_parent_failure": on_parent_failure,
            "tags": tags,
            "meta": meta,
        }
        if conn is None:
            return await asyncio.to_thread(functools.partial(self.enqueue, job_id, **options))
        with self._tracing.send(job_id, queue) as sending:
            request = await asyncio.to_thread(
                functools.partial(
                    self._enqueue_request,
                    job_id,
                    trace_context=None if sending is None else sending.context,
                    **options,
                )
            )
            [occurrence] = await self._enqueue_in_transaction_async(conn, [request])
            if sending is not None:
                sending.sent([occurrence])
            return occurrence

    async def enqueue_many_async(
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
        """:meth:`enqueue_many` for async code: the same options and rules, all or none, without
        blocking the event loop. ``conn`` is the caller's open async transaction, as for
        :meth:`enqueue_async`; without it the store's own transaction runs in a worker thread."""
        options: dict[str, Any] = {
            "keys": keys,
            "at": at,
            "at_ms": at_ms,
            "delay": delay,
            "delay_ms": delay_ms,
            "queue": queue,
            "priority": priority,
            "partitions": partitions,
            "after": after,
            "on_parent_failure": on_parent_failure,
            "tags": tags,
            "meta": meta,
        }
        if conn is None:
            return await asyncio.to_thread(
                functools.partial(self.enqueue_many, job_id, payloads, **options)
            )
        items = self._many_items(payloads, keys, partitions)
        with self._tracing.send(job_id, queue) as sending:
            requests = await asyncio.to_thread(
                functools.partial(
                    self._many_requests,
                    job_id,
                    items,
                    trace_context=None if sending is None else sending.context,
                    **options,
                )
            )
            occurrences = await self._enqueue_in_transaction_async(conn, requests)
            if sending is not None:
                sending.sent(occurrences)
            return occurrences
