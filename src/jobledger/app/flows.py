"""Graphs of work written whole (SPEC §10): ``app.flow()`` and its builder.

::

    with app.flow() as flow:
        images = [flow.enqueue("thumbnail", payload={"src": s}) for s in sources]
        summary = flow.enqueue("summary", after=images)
    # committed here, in one transaction; an exception inside the block writes nothing

    with app.flow(conn=conn) as flow:   # the same, inside the caller's open transaction (§8)
        ...

    async with app.flow_async(conn=async_conn) as flow:   # from async code (conn optional)
        charge = await flow.enqueue("charge", payload=...)
        await flow.enqueue("ship", after=[charge])

The builder reads each job once and returns, from ``flow.enqueue``, the occurrence the commit
will write (its id is exact: the commit refuses with ``SCHEDULER_FLOW_CONFLICT`` and writes
nothing if a job changed revision, or a key was taken, meanwhile). ``flow.occurrences`` holds
the occurrences as committed (a child whose parents were all decided already is ``queued``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from .. import contract
from ..errors import IdempotencyPayloadMismatch, InvalidArgument, JobDisabled
from ..models import UNSET, EnqueueRequest, Job, Occurrence, ParentFailurePolicy
from ..store import caller, inputs, rows, unknown_job
from .enqueue import EnqueueMethods, _parent_ids

__all__ = ["AsyncFlow", "Flow", "FlowMethods"]


class Flow:
    """The builder :meth:`FlowMethods.flow` yields: collects a graph, written on exit."""

    def __init__(self, app: EnqueueMethods, conn: object = None) -> None:
        self._app = app
        self._conn = conn
        self._requests: list[EnqueueRequest] = []
        self._expected: list[str] = []
        self._jobs: dict[str, Job] = {}
        self._keyed: dict[tuple[str, str], Occurrence] = {}
        self.occurrences: list[Occurrence] = []
        self.committed = False

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
    ) -> Occurrence:
        """Add one occurrence to the flow, as :meth:`App.enqueue` would write it (``tags`` and
        ``meta`` too); ``after``
        names parents in this flow (added before) or enqueued before it. Returns the occurrence
        as the commit will write it: its id is final; its instants (``created_at``,
        ``updated_at``) are 0 and its status a child's ``blocked`` until then — the committed
        values are in :attr:`occurrences` after the block."""
        if self.committed:
            raise InvalidArgument("this flow was already written; start a new app.flow()")
        scheduled_for = self._app._instant(at, at_ms, delay, delay_ms)
        trigger_key, once = self._app._trigger_key(key)
        request = EnqueueRequest(
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
            tags=() if tags is None else tags,
            meta=meta,
        )
        [checked] = inputs.normalize_enqueue_batch([request])  # refuse bad input at the call
        job = self._job(checked.job_id)
        existing = self._existing(checked) if once else None
        if existing is not None:
            occurrence = existing
        else:
            occurrence = _planned(checked, job)
            if once:
                self._keyed[(checked.job_id, checked.trigger_key)] = occurrence
        self._requests.append(request)
        self._expected.append(occurrence.id)
        return occurrence

    def _job(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            job = self._app.store.get_job(job_id)
            if job is None:
                known = self._app.store.list_jobs(limit=1000)
                raise unknown_job(job_id, ((other.id, other.kind) for other in known))
            if not job.enabled:
                raise JobDisabled(f"Scheduler job is disabled: {job_id}")
            self._jobs[job_id] = job
        return job

    def _existing(self, request: inputs.EnqueueInput) -> Occurrence | None:
        """The occurrence a key already names (in this flow, or stored), as the commit will
        find it; its first enqueue's parents stand."""
        found = self._keyed.get((request.job_id, request.trigger_key))
        if found is None:
            stored = self._app.store.list_occurrences_by_trigger(
                job_id=request.job_id, trigger_key=request.trigger_key
            )
            found = stored[0] if stored else None
        if found is None:
            return None
        if request.payload_json is not None and found.payload != request.payload:
            raise IdempotencyPayloadMismatch(
                "This key was used before with a different payload",
                details={"jobId": request.job_id, "triggerKey": request.trigger_key},
            )
        return replace(found, deduplicated=True)

    def _commit(self) -> None:
        self.committed = True
        if self._conn is not None:
            # Even an empty flow checks the caller's connection, as enqueue_many(conn=) does.
            self.occurrences = self._app._enqueue_flow_in_transaction(
                self._conn, self._requests, self._expected
            )
        elif self._requests:
            self.occurrences = self._app.store.enqueue_flow(
                self._requests, expected_ids=self._expected
            )

    async def _commit_async(self) -> None:
        self.committed = True
        if self._conn is not None:
            self.occurrences = await self._app._enqueue_flow_in_transaction_async(
                self._conn, self._requests, self._expected
            )
        elif self._requests:
            self.occurrences = await asyncio.to_thread(
                self._app.store.enqueue_flow, self._requests, expected_ids=self._expected
            )


class AsyncFlow:
    """The builder :meth:`FlowMethods.flow_async` yields: :class:`Flow` for async code, whose
    ``enqueue`` is awaited (its reads of jobs and keys run in a worker thread)."""

    def __init__(self, flow: Flow) -> None:
        self._flow = flow

    async def enqueue(self, job_id: str, **options: Any) -> Occurrence:
        """:meth:`Flow.enqueue`, awaited: the same options, the same planned occurrence."""
        return await asyncio.to_thread(functools.partial(self._flow.enqueue, job_id, **options))

    @property
    def occurrences(self) -> list[Occurrence]:
        """The occurrences as committed (after the block)."""
        return self._flow.occurrences

    @property
    def committed(self) -> bool:
        return self._flow.committed


def _planned(request: inputs.EnqueueInput, job: Job) -> Occurrence:
    """The occurrence the commit writes for a new firing of ``job``."""
    occurrence_id, _ = contract.occurrence_identity(
        request.job_id, job.revision, request.scheduled_for, request.trigger_key
    )
    return Occurrence(
        id=occurrence_id,
        job_id=request.job_id,
        job_revision=job.revision,
        idempotency_key=rows.idempotency_key_of(occurrence_id),
        trigger_key=request.trigger_key,
        scheduled_for=request.scheduled_for,
        available_at=request.available_at,
        status="blocked" if request.after else "queued",
        attempt=0,
        max_attempts=job.max_attempts,
        fence=0,
        lease_owner=None,
        lease_expires_at=None,
        authority=job.authority,
        payload=job.payload if request.payload_json is None else request.payload,
        last_error=None,
        result=None,
        created_at=0,
        updated_at=0,
        settled_at=None,
        kind=job.kind,
        queue=job.queue if request.queue is None else request.queue,
        priority=job.priority if request.priority is None else request.priority,
        partition=request.partition,
        on_lost_lease=job.on_lost_lease,
        parents=request.after,
        on_parent_failure=(
            "run" if request.on_parent_failure == "run" else "cancel" if request.after else None
        ),
        tags=request.tags,
        meta=None if request.meta_json is None else contract.parse_stored_json(request.meta_json),
    )


class FlowMethods(EnqueueMethods):
    """``app.flow()``: a graph of occurrences written in one transaction."""

    @contextmanager
    def flow(self, conn: object = None) -> Iterator[Flow]:
        """Collect ``flow.enqueue(...)`` calls and write them all in one transaction when the
        block ends; an exception inside the block (an abandoned flow) writes nothing.

        ``conn`` writes the graph inside the caller's open transaction (SPEC §8: a synchronous
        psycopg ``Connection``, SQLAlchemy ``Connection``/``Session``, Django ``connection``
        inside ``transaction.atomic()``, or a ``sqlite3.Connection`` on the store's own file),
        under the rules of :meth:`enqueue` with ``conn``: in a savepoint, never begun,
        committed or rolled back by jobledger, visible to workers when the caller commits. A
        refusal (``SCHEDULER_INVALID_ARGUMENT``) or ``SCHEDULER_FLOW_CONFLICT`` at the end of
        the block writes nothing and leaves the caller's transaction usable; an abandoned block
        sends nothing on ``conn``. The builder reads jobs and keys through the store's own
        connection, so it does not see what the caller's transaction wrote before the flow: a
        key first used there, for another instant, is a flow conflict.
        """
        if conn is not None:
            self._caller_tx_store()  # refuses a store that cannot write in a caller's transaction
            _refuse_early(conn)
        builder = Flow(self, conn)
        yield builder
        builder._commit()

    @asynccontextmanager
    async def flow_async(self, conn: object = None) -> AsyncIterator[AsyncFlow]:
        """:meth:`flow` for async code: ``async with app.flow_async() as flow:`` and ``await
        flow.enqueue(...)``; the graph is written in one transaction when the block ends,
        without blocking the event loop. ``conn`` is the caller's open async transaction (a
        psycopg ``AsyncConnection``, a SQLAlchemy ``AsyncSession``/``AsyncConnection``), under
        the rules of :meth:`enqueue_async` with ``conn``; a synchronous one is refused
        (``reason: sync_connection``). An exception inside the block writes nothing."""
        if conn is not None:
            self._caller_tx_store()
            await caller.resolve_async(conn)  # refuses a sync or unknown connection up front
        builder = Flow(self, conn)
        yield AsyncFlow(builder)
        await builder._commit_async()


def _refuse_early(conn: object) -> None:
    """Refuse, before the block runs, a ``conn`` that cannot take the flow: a kind jobledger
    does not accept, an async one (``app.flow`` is synchronous), or a SQLAlchemy or Django one
    outside a transaction. The commit checks it again in full (the store, the transaction)."""
    try:
        caller.resolve(conn)
    except InvalidArgument as exc:
        if (exc.details or {}).get("reason") == "async_connection":
            raise InvalidArgument(
                "app.flow(conn=...) takes a synchronous connection or session; an async one "
                "can go to app.enqueue_async(..., conn=...)",
                details={"field": "conn", "reason": "async_connection"},
            ) from None
        raise
