"""What operators and dashboards need: retention, the worker registry, queue statistics."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ... import contract
from ...errors import InvalidArgument
from ...models import (
    DEFAULT_PRUNE_BATCH,
    MAX_PRUNE_BATCH,
    AuditRecord,
    DueItem,
    LeaseHolder,
    PruneReport,
    ThroughputBucket,
    WorkerRecord,
)
from .. import inputs, rows
from ..tx import Row, Tx
from .base import OperationsBase

__all__ = ["AdminOperations"]

# Due waiting rows oldest_due reads (a claim promotes them in batches; more is a backlog the
# lanes' ready rows already show).
MAX_DUE_WAITING = 1_000
# A prune batch looks at this many times its size in rows at most (live rows, rows of other
# statuses and rows settled after the cutoff are passed over).
_SCANS_PER_BATCH = 4


class AdminOperations(OperationsBase):
    """Retention, the worker registry and statistics (read through the same store seam)."""

    # -- retention --------------------------------------------------------------------------

    def prune(
        self,
        *,
        before: int,
        actor: str,
        statuses: Sequence[str] = contract.PRUNABLE_STATUSES,
        batch_size: int = DEFAULT_PRUNE_BATCH,
        max_batches: int | None = None,
        on_batch: Callable[[PruneReport], None] | None = None,
    ) -> PruneReport:
        """Delete settled occurrences (settled before ``before``), their events and requeue
        records, in batches of ``batch_size``, each batch its own transaction.

        A batch walks the table in insertion (seq) order from where the last one stopped and
        deletes the next ``batch_size`` rows in ``statuses`` settled before ``before`` with
        everything that points at them, one statement per table for the whole batch. The walk
        ends at the first row created at or after ``before``; what it reads is the rows created
        before then (the live ones among them are passed over). ``on_batch`` (if given)
        sees each batch's own report after its commit (progress; raising stops the prune there).

        Live occurrences are never touched. Every batch writes, in the same transaction, an
        audit record (``action="pruned"``, with the actor and what it removed), so no deletion
        is ever unaccounted for. Also drops throughput minutes and stopped workers older than
        ``before``. ``max_batches`` bounds one call (``None``: until nothing is left).
        """
        cutoff = contract.normalize_epoch_ms(before, "before")
        who = contract.normalize_identifier(actor, "actor")
        if isinstance(statuses, str) or not isinstance(statuses, (list, tuple, set, frozenset)):
            raise InvalidArgument(
                "statuses must be a list of settled statuses", details={"field": "statuses"}
            )
        wanted = [inputs.normalize_status(status) for status in statuses]
        if not wanted or any(status not in contract.PRUNABLE_STATUSES for status in wanted):
            raise InvalidArgument(
                "only settled occurrences can be pruned (succeeded, dead_letter, cancelled)",
                details={"field": "statuses"},
            )
        pruned = frozenset(status for status in wanted if status is not None)
        size = contract.normalize_positive_int(batch_size, "batch_size")
        if size > MAX_PRUNE_BATCH:
            raise InvalidArgument(f"batch_size must be at most {MAX_PRUNE_BATCH}")
        if max_batches is not None:
            contract.normalize_positive_int(max_batches, "max_batches")
        totals: Counter[str] = Counter()
        by_status: Counter[str] = Counter()
        batches = 0
        # Where the walk stands: the seq of the last row looked at (None: at the end).
        position: int | None = 0
        while position is not None and (max_batches is None or batches < max_batches):
            batch = functools.partial(
                self._prune_batch,
                statuses=pruned,
                cutoff=cutoff,
                actor=who,
                size=size,
                after=position,
            )
            removed, of_status, position = self._write(batch)
            if removed["occurrences"]:
                batches += 1
                by_status.update(of_status)
                totals.update(removed)
                if on_batch is not None:
                    on_batch(
                        PruneReport(
                            before=cutoff,
                            occurrences=removed["occurrences"],
                            events=removed["events"],
                            requeues=removed["requeues"],
                            batches=1,
                            by_status=dict(of_status),
                        )
                    )

        def tidy(tx: Tx) -> None:
            tx.run("prune_throughput", {"before": cutoff})
            tx.run("prune_workers", {"before": cutoff})

        self._write(tidy)
        return PruneReport(
            before=cutoff,
            occurrences=totals["occurrences"],
            events=totals["events"],
            requeues=totals["requeues"],
            batches=batches,
            by_status=dict(by_status),
        )

    def _prune_batch(
        self,
        tx: Tx,
        *,
        statuses: frozenset[str],
        cutoff: int,
        actor: str,
        size: int,
        after: int,
    ) -> tuple[dict[str, int], Counter[str], int | None]:
        """One batch: up to ``size`` rows in ``statuses`` settled before ``cutoff``, found by
        walking the table in seq order (insertion order) after ``after`` — looking at no more
        than ``_SCANS_PER_BATCH * size`` rows — deleted with everything that points at them, one
        statement per table for the whole batch. Returns what it removed, per status, and where
        the walk goes on (``None``: at the end). The walk ends at the first row created at or
        after the cutoff: rows come in insertion order, so the rest are newer still (a later
        prune takes what settles before its own cutoff).

        Seq order, not one status and kind at a time: a batch's rows then lie together in the
        table and in every index ordered by insertion (events, the job and type indexes), so a
        batch rewrites a few pages per row instead of one or more for each (3.9x the rate at a
        million rows on SQLite, docs/benchmarks.md)."""
        now = tx.now()
        nothing = {"occurrences": 0, "events": 0, "requeues": 0}
        found: list[Row] = []
        moved: int | None = after
        looked = 0
        while moved is not None and len(found) < size and looked < _SCANS_PER_BATCH * size:
            scanned = tx.all("prunable_walk", {"after_seq": moved, "limit": size})
            if not scanned:
                moved = None
                break
            for row in scanned:
                if int(row["created_at"]) >= cutoff:
                    moved = None
                    break
                looked += 1
                moved = int(row["seq"])
                settled = row["settled_at"]
                if row["status"] in statuses and settled is not None and int(settled) < cutoff:
                    found.append(row)
                    if len(found) == size:
                        break
        if not found:
            return nothing, Counter(), moved
        seqs = {"seqs": tx.id_list([int(row["seq"]) for row in found])}
        tx.run("delete_keys_of_seqs", seqs)
        tx.run("delete_tags_of_seqs", seqs)
        tx.run("delete_dependencies_of_seqs", seqs)
        tx.run("delete_dependents_of_seqs", seqs)
        tx.run("delete_adjudications_of_seqs", seqs)
        requeues = tx.run("delete_requeues_of_seqs", seqs)
        events = tx.run("delete_events_of_seqs", seqs)
        occurrences = tx.run("delete_occurrences_of_seqs", seqs)
        jobs = Counter(row["job_id"] for row in found)
        of_status = Counter(str(row["status"]) for row in found)
        self._audit(
            tx,
            now=now,
            action="pruned",
            actor=actor,
            subject=None,
            data={
                "before": cutoff,
                "status": ",".join(sorted(of_status)),
                "statuses": dict(sorted(of_status.items())),
                "occurrences": occurrences,
                "events": events,
                "requeues": requeues,
                "jobs": dict(sorted(jobs.items())),
            },
        )
        removed = {"occurrences": occurrences, "events": events, "requeues": requeues}
        return removed, of_status, moved

    def audit_log(self, *, before_id: int | None = None, limit: int = 50) -> list[AuditRecord]:
        """Operator records (removed jobs, prunes), newest first."""
        self._assert_open()
        bounded = inputs.normalize_page_limit(limit)
        if before_id is not None and (not contract.is_safe_int(before_id) or before_id < 1):
            raise InvalidArgument("before_id must be a positive audit id")
        found = self._read(
            lambda tx: tx.all("list_audit", {"before_id": before_id, "limit": bounded})
        )
        return [
            AuditRecord(
                audit_id=int(row["audit_id"]),
                occurred_at=int(row["occurred_at"]),
                action=row["action"],
                actor=row["actor"],
                subject=row["subject"],
                data=rows.read_stored_json(row["data_json"], "audit data"),
            )
            for row in found
        ]

    # -- the worker registry ----------------------------------------------------------------

    def register_worker(
        self, *, worker_id: str, hostname: str, pid: int, info: dict[str, Any]
    ) -> None:
        """Announce a worker (or announce it again after a restart with the same id)."""
        params = {
            "worker_id": contract.normalize_identifier(worker_id, "workerId"),
            "hostname": contract.normalize_identifier(hostname, "hostname"),
            "pid": contract.normalize_epoch_ms(pid, "pid"),
            "info_json": contract.canonical_json(info, "worker.info"),
        }
        self._write(lambda tx: tx.run("upsert_worker", {**params, "now": tx.now()}))

    def touch_worker(self, worker_id: str) -> None:
        key = contract.normalize_identifier(worker_id, "workerId")
        self._write(lambda tx: tx.run("touch_worker", {"worker_id": key, "now": tx.now()}))

    def stop_worker(self, worker_id: str) -> None:
        key = contract.normalize_identifier(worker_id, "workerId")
        self._write(lambda tx: tx.run("stop_worker", {"worker_id": key, "now": tx.now()}))

    def list_workers(self, *, stopped_since: int | None = None) -> list[WorkerRecord]:
        """Workers not stopped, plus those stopped at or after ``stopped_since``."""
        self._assert_open()
        since = (
            contract.MAX_SAFE_INTEGER
            if stopped_since is None
            else contract.normalize_epoch_ms(stopped_since, "stopped_since")
        )
        found = self._read(lambda tx: tx.all("list_workers", {"since": since}))
        return [
            WorkerRecord(
                worker_id=row["worker_id"],
                hostname=row["hostname"],
                pid=int(row["pid"]),
                started_at=int(row["started_at"]),
                last_seen_at=int(row["last_seen_at"]),
                stopped_at=None if row["stopped_at"] is None else int(row["stopped_at"]),
                info=rows.read_stored_json(row["info_json"], "worker info"),
            )
            for row in found
        ]

    # -- statistics -------------------------------------------------------------------------

    def lease_holders(self) -> list[LeaseHolder]:
        """Who holds live leases, how many, and when they expire."""
        self._assert_open()
        found = self._read(lambda tx: tx.all("lease_holders"))
        return [
            LeaseHolder(
                owner_id=row["lease_owner"],
                leases=int(row["n"]),
                earliest_expiry=int(row["earliest_expiry"]),
                latest_expiry=int(row["latest_expiry"]),
            )
            for row in found
        ]

    def oldest_due(self, *, kinds: Collection[str] | None = None) -> list[DueItem]:
        """Per (queue, kind) lane with ready work, the occurrence the next claim of that lane
        takes (its highest priority, then most overdue); a lane whose due work has not been
        promoted yet (the next claim does that) shows its oldest due waiting row."""
        self._assert_open()
        wanted = inputs.normalize_kinds(None, kinds)

        def item(row: Mapping[str, Any]) -> DueItem:
            return DueItem(
                kind=row["kind"],
                occurrence_id=row["occurrence_id"],
                job_id=row["job_id"],
                status=row["status"],
                due_at=int(row["due_at"]),
                queue=row["queue"],
                priority=int(row["priority"]),
            )

        def body(tx: Tx) -> list[DueItem]:
            now = tx.now()
            items: dict[tuple[str, str], DueItem] = {}
            for lane in tx.all("ready_lanes"):
                if wanted is not None and lane["kind"] not in wanted:
                    continue
                params = {"queue": lane["queue"], "kind": lane["kind"], "now": now}
                row = tx.one("next_ready", params)
                if row is not None:
                    items[(row["queue"], row["kind"])] = item(row)
            for row in tx.all("due_waiting", {"now": now, "limit": MAX_DUE_WAITING}):
                if wanted is None or row["kind"] in wanted:
                    items.setdefault((row["queue"], row["kind"]), item(row))
            return list(items.values())

        return self._read(body)

    def throughput(self, *, since: int) -> list[ThroughputBucket]:
        """Settlements per minute and kind from ``since`` (epoch ms) on, oldest first."""
        self._assert_open()
        start = contract.normalize_epoch_ms(since, "since")
        found = self._read(lambda tx: tx.all("throughput_since", {"since": start}))
        return [
            ThroughputBucket(
                minute=int(row["minute"]),
                kind=row["kind"],
                succeeded=int(row["succeeded"]),
                retried=int(row["retried"]),
                dead_lettered=int(row["dead_lettered"]),
            )
            for row in found
        ]
