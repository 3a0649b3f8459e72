"""Graphs of work written whole (SPEC §10): ``app.flow()`` and its builder.

::

    with app.flow() as flow:
        images = [flow.enqueue("thumbnail", payload={"src": s}) for s in sources]
        summary = flow.enqueue("summary", after=images)
    # committed here, in one transaction; an exception inside the block writes nothing

The builder reads each job once and returns, from ``flow.enqueue``, the occurrence the commit
will write (its id is exact: the commit refuses with ``SCHEDULER_FLOW_CONFLICT`` and writes
nothing if a job changed revision, or a key was taken, meanwhile). ``flow.occurrences`` holds
the occurrences as committed (a child whose parents were all decided already is ``queued``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from .. import contract
from ..errors import IdempotencyPayloadMismatch, InvalidArgument, JobDisabled, NotFound
from ..models import UNSET, EnqueueRequest, Job, Occurrence, ParentFailurePolicy
from ..store import inputs, rows
from .enqueue import EnqueueMethods, _parent_ids

__all__ = ["Flow", "FlowMethods"]


class Flow:
    """The builder :meth:`FlowMethods.flow` yields: collects a graph, written on exit."""

    def __init__(self, app: EnqueueMethods) -> None:
        self._app = app
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
    ) -> Occurrence:
        """Add one occurrence to the flow, as :meth:`App.enqueue` would write it; ``after``
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
                raise NotFound(f"Scheduler job does not exist: {job_id}")
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
        if self._requests:
            self.occurrences = self._app.store.enqueue_flow(
                self._requests, expected_ids=self._expected
            )


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
    )


class FlowMethods(EnqueueMethods):
    """``app.flow()``: a graph of occurrences written in one transaction."""

    @contextmanager
    def flow(self, conn: None = None) -> Iterator[Flow]:
        """Collect ``flow.enqueue(...)`` calls and write them all in one transaction when the
        block ends; an exception inside the block (an abandoned flow) writes nothing.

        ``conn`` is reserved for writing the flow inside a caller's own database transaction;
        this version writes it in a transaction of its own and refuses any other value.
        """
        if conn is not None:
            raise InvalidArgument(
                "flow(conn=...) is not supported by this version: the flow is written in its "
                "own transaction (leave conn out)",
                details={"field": "conn"},
            )
        builder = Flow(self)
        yield builder
        builder._commit()
