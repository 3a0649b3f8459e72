"""What operators and dashboards need: retention, the worker registry, queue statistics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ... import contract
from ...errors import InvalidArgument
from ...models import (
    AuditRecord,
    DueItem,
    LeaseHolder,
    PruneReport,
    ThroughputBucket,
    WorkerRecord,
)
from .. import inputs, rows
from ..tx import Tx
from .base import OperationsBase

__all__ = ["AdminOperations"]

DEFAULT_PRUNE_BATCH = 500
MAX_PRUNE_BATCH = 5_000
# Due waiting rows oldest_due reads (a claim promotes them in batches; more is a backlog the
# lanes' ready rows already show).
MAX_DUE_WAITING = 1_000


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
    ) -> PruneReport:
        """Delete settled occurrences (settled before ``before``), their events and requeue
        records, in batches of ``batch_size``, each batch its own transaction.

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
        size = contract.normalize_positive_int(batch_size, "batch_size")
        if size > MAX_PRUNE_BATCH:
            raise InvalidArgument(f"batch_size must be at most {MAX_PRUNE_BATCH}")
        if max_batches is not None:
            contract.normalize_positive_int(max_batches, "max_batches")
        totals: Counter[str] = Counter()
        by_status: Counter[str] = Counter()
        batches = 0
        for status in wanted:
            assert status is not None

            def batch(tx: Tx, status: str = status) -> dict[str, int]:
                return self._prune_batch(tx, status, cutoff, who, size)

            while max_batches is None or batches < max_batches:
                removed = self._write(batch)
                if not removed["occurrences"]:
                    break
                batches += 1
                by_status[status] += removed["occurrences"]
                totals.update(removed)

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
        self, tx: Tx, status: str, cutoff: int, actor: str, size: int
    ) -> dict[str, int]:
        now = tx.now()
        found = tx.all("select_prunable", {"status": status, "before": cutoff, "limit": size})
        if not found:
            return {"occurrences": 0, "events": 0, "requeues": 0}
        ids = [{"occurrence_id": row["occurrence_id"]} for row in found]
        for row in found:
            tx.run(
                "delete_key_of_occurrence",
                {
                    "job_id": row["job_id"],
                    "trigger_key": row["trigger_key"],
                    "occurrence_id": row["occurrence_id"],
                },
            )
            tx.run("delete_dependencies_of_occurrence", {"seq": row["seq"]})
            tx.run("delete_adjudication_of_occurrence", {"occurrence_id": row["occurrence_id"]})
        requeues = sum(tx.run("delete_requeues_of_occurrence", item) for item in ids)
        events = sum(tx.run("delete_events_of_occurrence", item) for item in ids)
        occurrences = sum(tx.run("delete_occurrence", item) for item in ids)
        jobs = Counter(row["job_id"] for row in found)
        self._audit(
            tx,
            now=now,
            action="pruned",
            actor=actor,
            subject=None,
            data={
                "before": cutoff,
                "status": status,
                "occurrences": occurrences,
                "events": events,
                "requeues": requeues,
                "jobs": dict(sorted(jobs.items())),
            },
        )
        return {"occurrences": occurrences, "events": events, "requeues": requeues}

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
