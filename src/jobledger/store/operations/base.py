"""The base every operation group builds on: engine hooks and shared helpers."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from ... import contract
from ...errors import DataCorrupt
from ...models import Occurrence, SchemaInfo, VerifyCheck, VerifyReport
from .. import common, rows
from ..settle_signal import SettleSignal
from ..tx import Row, Tx, WorkSignal

__all__ = ["JobMeta", "OperationsBase", "required"]

T = TypeVar("T")
JOB_CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class JobMeta:
    """What an enqueue snapshots from a job, for one revision.

    Cached per store so enqueues need not read the job first; every insert re-checks the
    revision (and that the job is enabled) in SQL, so a stale entry can only cost a retry.
    """

    job_id: str
    revision: int
    enabled: bool
    kind: str
    workspace_id: str | None
    payload_json: str
    authority_json: str
    max_attempts: int
    queue: str = contract.DEFAULT_QUEUE
    priority: int = 0
    on_lost_lease: str = "retry"
    authority_id: int = 0
    authority: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Row) -> JobMeta:
        authority = contract.parse_stored_json(row["authority_json"])
        workspace = authority.get("workspaceId") if isinstance(authority, dict) else None
        return cls(
            job_id=row["job_id"],
            revision=int(row["revision"]),
            enabled=bool(row["enabled"]),
            kind=row["kind"],
            workspace_id=workspace if isinstance(workspace, str) else None,
            payload_json=row["payload_json"],
            authority_json=row["authority_json"],
            max_attempts=int(row["max_attempts"]),
            queue=row["queue"],
            priority=int(row["priority"]),
            on_lost_lease=row["on_lost_lease"],
            authority_id=int(row["authority_id"] or 0),
            authority=authority if isinstance(authority, dict) else {},
        )


class OperationsBase(ABC):
    """What every operation group needs: the engine hooks and the shared row helpers."""

    _target: str
    _work_signal: WorkSignal | None = None
    _settle_signal: SettleSignal | None = None
    _job_cache: OrderedDict[str, JobMeta] | None = None
    _job_cache_lock = threading.Lock()
    # authority_id -> envelope: authority rows never change or go away, so this never goes
    # stale (it is bounded by the number of distinct authorities in the store).
    _authorities: dict[int, dict[str, Any]] | None = None

    @property
    def work_signal(self) -> WorkSignal:
        """Bumped when work may have become claimable (see :class:`WorkSignal`)."""
        if self._work_signal is None:
            self._work_signal = WorkSignal()
        return self._work_signal

    @property
    def settle_signal(self) -> SettleSignal:
        """Wakes result waiters when their occurrence may have become terminal (a latency hint;
        they still poll). On PostgreSQL, settles in other processes wake them through
        LISTEN/NOTIFY."""
        if self._settle_signal is None:
            self._settle_signal = SettleSignal()
        return self._settle_signal

    @property
    def target(self) -> str:
        return self._target

    # -- engine hooks -----------------------------------------------------------------------

    @abstractmethod
    def _write(self, body: Callable[[Tx], T]) -> T:
        """Run ``body`` in one write transaction (commit on return, roll back on error)."""

    @abstractmethod
    def _read(self, body: Callable[[Tx], T]) -> T:
        """Run ``body`` with read access (a consistent snapshot where the engine offers one)."""

    @abstractmethod
    def _assert_open(self) -> None: ...

    @abstractmethod
    def _cancel_in(
        self, tx: Tx, now: int, current: Row, *, actor: str, reason: str
    ) -> Occurrence | None:
        """Cancel one occurrence inside ``tx`` (``LeaseOperations``; the planner's overlap
        policy cancels through it too)."""

    @abstractmethod
    def _take_locks(self, tx: Tx, *, shared: Sequence[str], exclusive: Sequence[str]) -> None:
        """Serialize claims, pauses and admissions per queue, owner or partition (lock names,
        in the order given). PostgreSQL takes transaction-scoped advisory locks; SQLite needs
        none: one writer at a time already serializes every write transaction."""

    def _held_owners(self, owners: Collection[str]) -> frozenset[str]:
        """The owners among ``owners`` whose liveness lock is held now — certainly alive. SQLite
        answers from the lock files; elsewhere none: PostgreSQL judges every lease on the
        database's clock, which a worker machine's clock step does not move."""
        return frozenset()

    def _give_back_unstarted(
        self, tx: Tx, now: int, held: Sequence[Row], *, reason: str, expired: bool = True
    ) -> list[Row]:
        """Give back the claims among ``held`` (rows with ``occurrence_id``, ``lease_owner``,
        ``fence``) whose handler never began (``started_at`` NULL) and whose holder is gone —
        their lease expired, or (``expired=False``) their owner is known dead: each goes back to
        ``retry_wait``, claimable at once through staging, its attempt not spent — no dead
        letter, no outcome-unknown case, no backoff. Appends ``occurrence_released`` ``{attempt,
        reason, started: false}`` per row (owner and fence: the claim's). Returns the rows given
        back, as the statement left them."""
        if not held:
            return []
        updated = tx.rows_many(
            "give_back_unstarted",
            [
                {
                    "occurrence_id": row["occurrence_id"],
                    "owner_id": row["lease_owner"],
                    "fence": row["fence"],
                    "now": now,
                    "expired": 1 if expired else 0,
                }
                for row in held
            ],
        )
        given = [
            (before["lease_owner"], after)
            for before, after in zip(held, updated, strict=True)
            if after is not None
        ]
        if given:
            events = [
                common.event_params(
                    job_id=row["job_id"],
                    occurrence_id=row["occurrence_id"],
                    event_type="occurrence_released",
                    occurred_at=int(row["updated_at"]),
                    owner_id=owner,
                    fence=int(row["fence"]),
                    data_json=contract.encode_trusted_json(
                        {"attempt": int(row["attempt"]), "reason": reason, "started": False}
                    ),
                )
                for owner, row in given
            ]
            tx.run("insert_events", tx.table(events))
        return [row for _, row in given]

    def _without_live_leases(self, rows: Sequence[Row]) -> list[Row]:
        """These expired-lease rows less those a live owner still holds: its lock is held and
        nothing ended the lease (``lease_expires_at > updated_at``: not reaped, not changed
        since it expired) — that owner may still renew or settle it. One lock check per
        distinct owner, and none at all on PostgreSQL or when no lease expired."""

        def kept_by_owner(row: Row) -> bool:
            return row["lease_owner"] is not None and int(row["lease_expires_at"]) > int(
                row["updated_at"]
            )

        owners = {row["lease_owner"] for row in rows if kept_by_owner(row)}
        live = self._held_owners(owners) if owners else frozenset()
        if not live:
            return list(rows)
        return [row for row in rows if not (kept_by_owner(row) and row["lease_owner"] in live)]

    def _probe_ready(
        self,
        tx: Tx,
        *,
        now: int,
        lanes: Sequence[tuple[str, str, int]],
        workspace: str | None,
    ) -> list[Row]:
        """The ready rows of each (queue, kind, room) lane, at most room each, merged in claim
        order (priority descending, due instant, slot, occurrence id). One index probe per lane
        here; PostgreSQL does them all in one statement and locks them (``SKIP LOCKED``)."""
        query = "ready_probe" if workspace is None else "ready_probe_in_workspace"
        found: list[Row] = []
        for queue, kind, room in lanes:
            params = {"queue": queue, "kind": kind, "now": now, "limit": room}
            if workspace is not None:
                params["workspace_id"] = workspace
            found.extend(tx.all(query, params))
        found.sort(
            key=lambda row: (
                -int(row["priority"]),
                row["due_at"],
                row["scheduled_for"],
                row["occurrence_id"],
            )
        )
        return found

    @abstractmethod
    def schema_info(self) -> SchemaInfo: ...

    @abstractmethod
    def verify(self) -> VerifyReport:
        """Check the whole database (see :meth:`jobledger.Store.verify`)."""

    @staticmethod
    def _with_enqueue_events(
        report: VerifyReport, tx: Tx, unreadable: tuple[type[Exception], ...]
    ) -> VerifyReport:
        """``report`` and one more check, when its schema check passed: every occurrence has
        its ``occurrence_enqueued`` event (``enqueue_events``; the first ten ids that have
        none, and how many). A database error of a kind in ``unreadable`` (damaged pages) fails
        the check, naming the error, instead of escaping."""
        if not any(check.name == "schema" and check.ok for check in report.checks):
            return report
        try:
            missing = tx.all("occurrences_without_enqueue_event", {"limit": 10})
        except unreadable as exc:
            failed = VerifyCheck("enqueue_events", False, {"error": type(exc).__name__})
            return VerifyReport((*report.checks, failed))
        check = VerifyCheck(
            "enqueue_events",
            not missing,
            None
            if not missing
            else {
                "count": int(missing[0]["missing"]),
                "ids": [str(row["occurrence_id"]) for row in missing],
            },
        )
        return VerifyReport((*report.checks, check))

    @abstractmethod
    def close(self) -> None: ...

    def _after_enqueue(self) -> None:
        """Called after new work commits: wakes this process's waiting workers. (Other
        processes on PostgreSQL are woken by the NOTIFY the transaction itself sent when one of
        its statements made work claimable; see ``_WAKING_QUERIES`` there.)"""
        self.work_signal.notify()

    def _after_settle(self, ids: Iterable[str]) -> None:
        """Called after occurrences ``ids`` may have become terminal: wakes this process's
        waiters for them (other processes hear the NOTIFY the transaction sent, on
        PostgreSQL)."""
        if self._settle_signal is not None:  # nobody in this process ever waited otherwise
            self._settle_signal.notify(ids)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the job cache ----------------------------------------------------------------------

    def _cached_job(self, job_id: str) -> JobMeta | None:
        cache = self._job_cache
        if cache is None:
            return None
        with self._job_cache_lock:
            return cache.get(job_id)

    def _remember_job(self, meta: JobMeta) -> None:
        with self._job_cache_lock:
            if self._job_cache is None:
                self._job_cache = OrderedDict()
            cache = self._job_cache
            cache[meta.job_id] = meta
            cache.move_to_end(meta.job_id)
            while len(cache) > JOB_CACHE_SIZE:
                cache.popitem(last=False)

    def _forget_job(self, job_id: str) -> None:
        with self._job_cache_lock:
            if self._job_cache is not None:
                self._job_cache.pop(job_id, None)

    def _load_job_meta(self, tx: Tx, job_id: str) -> JobMeta | None:
        row = self._job_row(tx, job_id)
        if row is None:
            self._forget_job(job_id)
            return None
        meta = JobMeta.from_row(row)
        self._remember_job(meta)
        return meta

    # -- occurrences from rows --------------------------------------------------------------

    def _authority_of(self, tx: Tx, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The envelopes of these authority ids (cached; one query for the ones not cached)."""
        cache = self._authorities
        if cache is None:
            cache = self._authorities = {}
        missing = sorted({int(i) for i in ids if int(i) not in cache})
        if missing:
            for row in tx.all("authorities_by_id", {"ids": tx.id_list(missing)}):
                cache[int(row["authority_id"])] = rows.read_authority(row["authority_json"])
        return cache

    def _occurrences(self, tx: Tx, found: Sequence[Row], **options: Any) -> list[Occurrence]:
        """Occurrences from rows of ``occurrences`` (their authorities and, for those that have
        any, their parents resolved); ``options`` as for :func:`rows.occurrence_from_row`."""
        if not found:
            return []
        authorities = self._authority_of(tx, [row["authority_id"] for row in found])
        built = []
        for row in found:
            parents: tuple[str, ...] = ()
            if row["on_parent_failure"] is not None:
                parents = tuple(
                    parent["occurrence_id"] for parent in tx.all("parents_of", {"seq": row["seq"]})
                )
            built.append(
                rows.occurrence_from_row(
                    row,
                    authority=authorities[int(row["authority_id"])],
                    parents=parents,
                    **options,
                )
            )
        return built

    def _occurrence(self, tx: Tx, row: Row, **options: Any) -> Occurrence:
        [occurrence] = self._occurrences(tx, [row], **options)
        return occurrence

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _append_event(
        tx: Tx,
        *,
        job_id: str,
        event_type: str,
        occurred_at: int,
        data: Mapping[str, Any],
        occurrence_id: str | None = None,
        owner_id: str | None = None,
        fence: int | None = None,
    ) -> None:
        tx.run(
            "insert_event",
            common.event_params(
                job_id=job_id,
                occurrence_id=occurrence_id,
                event_type=event_type,
                occurred_at=occurred_at,
                owner_id=owner_id,
                fence=fence,
                data_json=contract.canonical_json(dict(data), "event.data"),
            ),
        )

    @staticmethod
    def _audit(
        tx: Tx, *, now: int, action: str, actor: str, subject: str | None, data: Mapping[str, Any]
    ) -> None:
        tx.run(
            "insert_audit",
            {
                "now": now,
                "action": action,
                "actor": actor,
                "subject": subject,
                "data_json": contract.canonical_json(dict(data), "audit.data"),
            },
        )

    @staticmethod
    def _job_row(tx: Tx, job_id: str) -> Row | None:
        return tx.one("get_job", {"job_id": job_id})

    @staticmethod
    def _occurrence_row(tx: Tx, occurrence_id: str) -> Row | None:
        return tx.one("get_occurrence", {"occurrence_id": occurrence_id})


def required(row: Row | None) -> Row:
    if row is None:
        raise DataCorrupt("A row written in this transaction could not be read back")
    return row
