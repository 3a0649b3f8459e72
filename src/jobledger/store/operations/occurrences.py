"""Recording firings (idempotent enqueue, one or many) and reading occurrences and events."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

from ... import contract
from ...errors import (
    Conflict,
    DataCorrupt,
    IdempotencyPayloadMismatch,
    InvalidArgument,
    JobDisabled,
    NotFound,
)
from ...models import UNSET, EnqueueRequest, Event, Occurrence
from .. import common, inputs, rows
from ..group_commit import GroupCommit
from ..tx import Row, Tx
from . import dependencies
from .base import JobMeta, OperationsBase
from .firings import (
    Firing,
    enqueued_event,
    firing_of,
    insert_firings,
    insert_params,
    insert_tags,
    new_occurrence,
)

__all__ = ["OccurrenceOperations", "flow_plan"]

# A stale cached job costs one re-read; after that the job row read inside the transaction is
# current, so a second miss means the job really is missing or disabled.
_ENQUEUE_TRIES = 2


def flow_plan(
    requests: Sequence[EnqueueRequest], expected_ids: Sequence[str]
) -> tuple[list[inputs.EnqueueInput], Callable[[list[Occurrence]], None]]:
    """A flow's requests, checked, and the check its transaction runs on what it wrote:
    ``SCHEDULER_FLOW_CONFLICT`` unless each request wrote, or found by its key, the occurrence
    at the same index of ``expected_ids`` (shared by :meth:`OccurrenceOperations.enqueue_flow`
    and the caller-transaction twin in ``caller_tx.py``)."""
    normalized = inputs.normalize_enqueue_batch(requests)
    if not isinstance(expected_ids, (list, tuple)) or len(expected_ids) != len(normalized):
        raise InvalidArgument(
            "expected_ids must hold one occurrence id per request",
            details={"field": "expectedIds"},
        )

    def check(written: list[Occurrence]) -> None:
        for index, (occurrence, expected) in enumerate(zip(written, expected_ids, strict=True)):
            if occurrence.id != expected:
                raise Conflict(
                    "The flow changed while it was built (a job was updated, or a key was "
                    "used meanwhile); nothing was written: build it again",
                    code="SCHEDULER_FLOW_CONFLICT",
                    details={"index": index, "expected": expected, "actual": occurrence.id},
                )

    return normalized, check


class OccurrenceOperations(OperationsBase):
    """Recording firings (idempotent enqueue, one or many) and reading occurrences and events."""

    @cached_property
    def _enqueue_group(self) -> GroupCommit[tuple[list[Occurrence], bool]]:
        # Made on first use (two threads racing here may each make one: each serves its own
        # callers to the end, so nothing is lost, only that first group split in two).
        return GroupCommit(self._write)

    # -- enqueue ----------------------------------------------------------------------------

    def enqueue_occurrence(
        self,
        *,
        job_id: str,
        scheduled_for: int,
        trigger_key: str,
        available_at: int | None = None,
        payload: Any = UNSET,
        queue: str | None = None,
        priority: int | None = None,
        partition: str | None = None,
        trace_context: Mapping[str, str] | None = None,
    ) -> Occurrence:
        request = inputs.normalize_enqueue(
            job_id,
            scheduled_for,
            trigger_key,
            available_at,
            payload,
            once_per_trigger=False,
            queue=queue,
            priority=priority,
            partition=partition,
            trace_context=trace_context,
        )
        return self._enqueue_requests([request])[0]

    def enqueue_occurrence_once_per_trigger(
        self,
        *,
        job_id: str,
        scheduled_for: int,
        trigger_key: str,
        available_at: int | None = None,
        payload: Any = UNSET,
        queue: str | None = None,
        priority: int | None = None,
        partition: str | None = None,
    ) -> Occurrence:
        request = inputs.normalize_enqueue(
            job_id,
            scheduled_for,
            trigger_key,
            available_at,
            payload,
            once_per_trigger=True,
            queue=queue,
            priority=priority,
            partition=partition,
        )
        return self._enqueue_requests([request])[0]

    def enqueue_batch(self, requests: Sequence[EnqueueRequest]) -> list[Occurrence]:
        normalized = inputs.normalize_enqueue_batch(requests)
        if not normalized:
            self._assert_open()
            return []
        return self._enqueue_requests(normalized)

    def enqueue_flow(
        self, requests: Sequence[EnqueueRequest], *, expected_ids: Sequence[str]
    ) -> list[Occurrence]:
        normalized, check = flow_plan(requests, expected_ids)
        if not normalized:
            self._assert_open()
            return []
        return self._enqueue_requests(normalized, check)

    def _enqueue_requests(
        self,
        requests: Sequence[inputs.EnqueueInput],
        check: Callable[[list[Occurrence]], None] | None = None,
    ) -> list[Occurrence]:
        """Write ``requests`` in one transaction — shared with concurrent enqueues of this
        store (group commit: ``store/group_commit.py``), each call all or nothing on its own;
        ``check`` (if given) sees the results inside it and may raise to write nothing."""

        def body(tx: Tx) -> tuple[list[Occurrence], bool]:
            written, wrote_events = self._enqueue_body(tx, requests)
            if check is not None:
                check(written)
            return written, wrote_events

        occurrences, wrote_events = self._enqueue_group.run(body)
        if wrote_events:
            self._after_enqueue()
        return occurrences

    def _enqueue_body(
        self, tx: Tx, requests: Sequence[inputs.EnqueueInput]
    ) -> tuple[list[Occurrence], bool]:
        """Write ``requests`` in ``tx`` (the store's own transaction, or a caller's: see
        ``caller_tx.py``); returns the occurrences and whether any new one was written."""
        now = tx.now()
        metas: dict[str, JobMeta | None] = {}
        results: list[Occurrence | None] = [None] * len(requests)
        events: list[dict[str, Any]] = []
        # The common case in bulk: new firings of known, enabled jobs, one insert each
        # (pipelined on PostgreSQL). Whatever that does not settle takes the general path.
        bulk: list[tuple[int, Firing]] = []
        for index, request in enumerate(requests):
            if request.once_per_trigger:
                continue
            meta = self._job_meta(tx, request.job_id, metas)
            if meta is None or not meta.enabled:
                continue
            bulk.append((index, firing_of(request, meta)))
        inserted = insert_firings(tx, now, [firing for _, firing in bulk])
        for index, firing in bulk:
            if firing.occurrence_id in inserted:
                results[index], new_event = inserted[firing.occurrence_id]
                events.append(new_event)
        for index, request in enumerate(requests):
            if results[index] is not None:
                continue
            try:
                occurrence, event = self._enqueue_one(tx, now, request, metas)
            except (NotFound, JobDisabled, IdempotencyPayloadMismatch, DataCorrupt) as exc:
                if len(requests) > 1:
                    exc.details = {**(exc.details or {}), "index": index}
                raise
            if event is not None:
                events.append(event)
            results[index] = occurrence
        if events:
            tx.run("insert_events", tx.table(events))
        written = [occurrence for occurrence in results if occurrence is not None]
        if any(request.after for request in requests):
            written = self._link_parents(tx, now, requests, written)
        return written, bool(events)

    def _link_parents(
        self,
        tx: Tx,
        now: int,
        requests: Sequence[inputs.EnqueueInput],
        written: list[Occurrence],
    ) -> list[Occurrence]:
        """Link the new children among ``written`` to their parents (a deduplicated one keeps
        the parents its first enqueue gave it) and return them as they now are."""
        children = [
            (occurrence.id, request.after, request.on_parent_failure or "cancel")
            for request, occurrence in zip(requests, written, strict=True)
            if request.after and not occurrence.deduplicated
        ]
        if not children:
            return written
        try:
            dependencies.link_children(tx, now, children, [o.id for o in written])
        except NotFound as exc:
            details = exc.details or {}
            if len(requests) > 1:
                child = details.get("occurrenceId")
                index = next(i for i, o in enumerate(written) if o.id == child)
                exc.details = {**details, "index": index}
            raise
        linked = {child for child, _, _ in children}
        fresh = {
            occurrence.id: occurrence
            for occurrence in self._occurrences(
                tx, tx.all("occurrences_by_ids", {"ids": tx.id_list(sorted(linked))})
            )
        }
        return [fresh.get(occurrence.id, occurrence) for occurrence in written]

    def _job_meta(self, tx: Tx, job_id: str, metas: dict[str, JobMeta | None]) -> JobMeta | None:
        if job_id in metas:
            return metas[job_id]
        meta = self._cached_job(job_id)
        if meta is None:
            meta = self._load_job_meta(tx, job_id)
        metas[job_id] = meta
        return meta

    def _enqueue_one(
        self,
        tx: Tx,
        now: int,
        request: inputs.EnqueueInput,
        metas: dict[str, JobMeta | None],
    ) -> tuple[Occurrence, dict[str, Any] | None]:
        key, trigger = request.job_id, request.trigger_key
        if request.once_per_trigger:
            # A key used before answers whatever became of the job since (the reference's rule).
            existing = self._used_key(tx, request)
            if existing is not None:
                return existing, None
        key_taken = False
        for attempt in range(_ENQUEUE_TRIES):
            meta = self._job_meta(tx, key, metas)
            if meta is None:
                raise self._unknown_job(tx, key)
            if not meta.enabled:
                if attempt == 0:  # the cache may be stale: read the row itself once
                    metas[key] = self._load_job_meta(tx, key)
                    continue
                raise JobDisabled(f"Scheduler job is disabled: {key}")
            firing = firing_of(request, meta)
            if request.once_per_trigger:
                params = {
                    "job_id": key,
                    "trigger_key": trigger,
                    "occurrence_id": firing.occurrence_id,
                }
                if key_taken:
                    tx.run("point_key", params)  # ours: it now names this revision's firing
                elif tx.one("take_key", params) is None:
                    # Another transaction took the key first (this one waited for its commit).
                    return self._key_holder(tx, request), None
                key_taken = True
            written = tx.one("insert_occurrence_from_job", insert_params(firing, now))
            if written is not None:
                if request.tags:
                    insert_tags(tx, [(int(written["seq"]), request.tags)])
                return new_occurrence(firing, now), enqueued_event(firing, now)
            stored = self._occurrence_row(tx, firing.occurrence_id)
            if stored is None:
                # Nothing inserted and nothing there: the job changed under the cached entry.
                metas[key] = self._load_job_meta(tx, key)
                continue
            payload_json = (
                meta.payload_json if request.payload_json is None else request.payload_json
            )
            if stored["payload_json"] != payload_json:
                raise IdempotencyPayloadMismatch(
                    "Occurrence idempotency identity was reused with a different payload",
                    details={"jobId": key, "triggerKey": trigger},
                )
            return self._occurrence(tx, stored, deduplicated=True), None
        meta = metas.get(key)
        if meta is None:
            raise self._unknown_job(tx, key)
        raise JobDisabled(f"Scheduler job is disabled: {key}")

    @staticmethod
    def _unknown_job(tx: Tx, key: str) -> NotFound:
        """NOT_FOUND for ``key``, with a hint if it names a job's kind or is close to a name."""
        found = tx.all("job_names", {"limit": common.JOB_NAMES_LIMIT})
        return common.unknown_job(key, ((row["job_id"], row["kind"]) for row in found))

    def _used_key(self, tx: Tx, request: inputs.EnqueueInput) -> Occurrence | None:
        """The occurrence that already has ``request``'s idempotency key, if any.

        Keys live in ``jobledger_keys``; the key row goes in before its occurrence, so a second
        transaction enqueuing the same key at the same instant — in this process or any other —
        waits for the first (PostgreSQL) or runs after it (SQLite) and finds it taken: a key is
        one occurrence however many callers race on it. Keys used before schema v4 were
        recorded by the migration; a once-per-trigger key of another form with no record yet
        (the reference's API) is looked up among the job's occurrences once, and recorded.
        """
        params = {"job_id": request.job_id, "trigger_key": request.trigger_key}
        found = tx.one("occurrence_of_key", params)
        if found is not None:
            return self._matching(tx, request, found)
        if request.trigger_key.startswith("key:"):
            return None
        legacy = tx.all("list_occurrences_by_trigger", {**params, "limit": 2})
        if len(legacy) > 1:
            raise DataCorrupt(
                "More than one occurrence exists for a once-per-trigger key",
                details={"jobId": request.job_id, "triggerKey": request.trigger_key},
            )
        if not legacy:
            return None
        tx.run("take_key", {**params, "occurrence_id": legacy[0]["occurrence_id"]})
        return self._matching(tx, request, legacy[0])

    def _key_holder(self, tx: Tx, request: inputs.EnqueueInput) -> Occurrence:
        found = tx.one(
            "occurrence_of_key", {"job_id": request.job_id, "trigger_key": request.trigger_key}
        )
        if found is None:
            raise DataCorrupt(
                "An idempotency key names an occurrence that does not exist",
                details={"jobId": request.job_id, "triggerKey": request.trigger_key},
            )
        return self._matching(tx, request, found)

    def _matching(self, tx: Tx, request: inputs.EnqueueInput, found: Row) -> Occurrence:
        if (
            request.match_payload
            and request.payload_json is not None
            and found["payload_json"] != request.payload_json
        ):
            raise IdempotencyPayloadMismatch(
                "This key was used before with a different payload",
                details={"jobId": request.job_id, "triggerKey": request.trigger_key},
            )
        return self._occurrence(tx, found, deduplicated=True)

    # -- reads ------------------------------------------------------------------------------

    def get_occurrence(self, occurrence_id: str) -> Occurrence | None:
        self._assert_open()
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")

        def body(tx: Tx) -> Occurrence | None:
            row = self._occurrence_row(tx, key)
            return None if row is None else self._occurrence(tx, row)

        return self._read(body)

    def resolve_occurrence_id(self, prefix: str) -> str:
        self._assert_open()
        low = occurrence_id_prefix(prefix)
        # The ids starting with ``low`` are exactly those in [low, high): ids are lowercase hex
        # after ``occ_``, and the next hex digit (9 -> a, f -> g) sorts after every hex digit
        # in byte order and in a linguistic collation alike, so a PostgreSQL database with a
        # non-C collation scans its own index the same way.
        high = low[:-1] + _NEXT_HEX[low[-1]]
        params = {"low": low, "high": high, "limit": AMBIGUOUS_SHOWN + 1}
        found = self._read(lambda tx: tx.all("occurrence_ids_by_prefix", params))
        ids = [str(row["occurrence_id"]) for row in found]
        if len(ids) == 1:
            return ids[0]
        if not ids:
            raise NotFound(
                f"Scheduler occurrence does not exist: {low}"
                if len(low) == _FULL_ID_LENGTH
                else f"No scheduler occurrence id starts with {low}",
                details={"occurrenceId": low},
            )
        raise ambiguous_prefix(low, ids)

    def list_occurrences_by_trigger(
        self, *, job_id: str, trigger_key: str, limit: int = 2
    ) -> list[Occurrence]:
        self._assert_open()
        params = {
            "job_id": contract.normalize_identifier(job_id, "jobId"),
            "trigger_key": contract.normalize_identifier(trigger_key, "triggerKey"),
            "limit": inputs.normalize_limit(limit),
        }
        return self._read(
            lambda tx: self._occurrences(tx, tx.all("list_occurrences_by_trigger", params))
        )

    def history(
        self,
        *,
        occurrence_id: str | None = None,
        job_id: str | None = None,
        limit: int = contract.DEFAULT_HISTORY_LIMIT,
    ) -> list[Event]:
        self._assert_open()
        bounded = contract.normalize_history_limit(limit)
        occurrence = inputs.normalize_optional_identifier(occurrence_id, "occurrenceId")
        job = inputs.normalize_optional_identifier(job_id, "jobId")
        params: dict[str, Any] = {"limit": bounded, "occurrence_id": occurrence, "job_id": job}
        if occurrence is not None and job is not None:
            query = "history_by_occurrence_and_job"
        elif occurrence is not None:
            query = "history_by_occurrence"
        elif job is not None:
            query = "history_by_job"
        else:
            query = "history_all"
        found = self._read(lambda tx: tx.all(query, params))
        return [rows.event_from_row(row) for row in found]

    def events(
        self,
        *,
        occurrence_id: str | None = None,
        job_id: str | None = None,
        event_type: str | None = None,
        before_id: int | None = None,
        after_id: int | None = None,
        limit: int = contract.DEFAULT_HISTORY_LIMIT,
    ) -> list[Event]:
        self._assert_open()
        bounded = inputs.normalize_page_limit(limit)
        params: dict[str, Any] = {
            "occurrence_id": inputs.normalize_optional_identifier(occurrence_id, "occurrenceId"),
            "job_id": inputs.normalize_optional_identifier(job_id, "jobId"),
            "event_type": inputs.normalize_optional_identifier(event_type, "eventType", 128),
            "before_id": None if before_id is None else _event_id(before_id, "before_id"),
            "after_id": None if after_id is None else _event_id(after_id, "after_id"),
            "limit": bounded,
        }
        forwards = params["after_id"] is not None and params["before_id"] is None
        # Following the log forwards: oldest first, so a tail can resume from the last id.
        query = ("history_after" if forwards else "history_page") + _events_index(params)
        found = self._read(lambda tx: tx.all(query, params))
        return [rows.event_from_row(row) for row in found]


def _events_index(params: dict[str, Any]) -> str:
    """Which index an events page reads (the suffix of its query's name, store/queries.sql):
    an occurrence's events, a type's (with or without a job), a job's, or the whole log."""
    if params["occurrence_id"] is not None:
        return "_by_occurrence"
    if params["event_type"] is not None:
        return "_by_job_type" if params["job_id"] is not None else "_by_type"
    return "_by_job" if params["job_id"] is not None else ""


AMBIGUOUS_SHOWN = 5
MIN_PREFIX_DIGITS = 8
_FULL_ID_LENGTH = len("occ_") + 64  # occ_ and a SHA-256 in hex (contract.occurrence_identity)
_OCCURRENCE_PREFIX = re.compile(rf"(?:occ_)?([0-9a-f]{{{MIN_PREFIX_DIGITS},64}})")
_HEX_THEN_G = "0123456789abcdefg"
_NEXT_HEX = {digit: _HEX_THEN_G[index + 1] for index, digit in enumerate(_HEX_THEN_G[:-1])}


def occurrence_id_prefix(value: object) -> str:
    """``occ_<hex>`` from an occurrence id or its start (``occ_`` optional, ≥ 8 hex digits)."""
    text = value.strip().lower() if isinstance(value, str) else None
    found = None if text is None else _OCCURRENCE_PREFIX.fullmatch(text)
    if found is None:
        shown = value if not isinstance(value, str) or len(value) <= 72 else value[:69] + "..."
        raise InvalidArgument(
            f"not an occurrence id or the start of one: {shown!r} (give occ_ and at least "
            f"{MIN_PREFIX_DIGITS} hex digits of it; occ_ may be left out)",
            details={"field": "occurrenceId"},
        )
    return "occ_" + found[1]


def ambiguous_prefix(prefix: str, ids: list[str]) -> InvalidArgument:
    """``SCHEDULER_AMBIGUOUS_ID`` naming a few of ``ids`` (sorted), each cut just long enough
    to tell it from its neighbours."""
    shown = ids[:AMBIGUOUS_SHOWN]
    common = max(_common_length(first, second) for first, second in itertools.pairwise(shown))
    width = max(len("occ_") + 12, common + 1)
    names = ", ".join(f"{key[:width]}…" for key in shown)
    more = "more than " if len(ids) > AMBIGUOUS_SHOWN else ""
    return InvalidArgument(
        f"{prefix} is the start of {more}{len(shown)} occurrence ids ({names}); give more of it",
        code="SCHEDULER_AMBIGUOUS_ID",
        details={"prefix": prefix, "candidates": shown},
    )


def _common_length(first: str, second: str) -> int:
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return length


def _event_id(value: object, field: str) -> int:
    if not isinstance(value, int) or not contract.is_safe_int(value) or value < 0:
        raise InvalidArgument(f"{field} must be a non-negative event id")
    return value
