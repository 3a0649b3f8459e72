"""Operators' reads of occurrences: pages newest first and counts, each bounded by an index.

Pages go newest first by ``seq`` (insertion order: SQLite's rowid, PostgreSQL's identity), and
every page is a backward range of an index that ends in ``seq``, below the cursor:

* no filter: the primary key; ``status`` and ``kind``: the status index (status, kind, seq);
* ``kind`` alone: the status index status by status (seven ranges), merged;
* ``status`` alone: the status index kind by kind — the kinds in that status are found by a
  skip scan (one probe per kind), each gives at most one page of its newest rows, and the
  newest of those make the page: the work grows with the kinds in that status, not the rows;
* ``key`` (an idempotency key, without ``key:``): ``jobledger_keys_key``, at most one row per
  job; ``tag``: the primary key of ``jobledger_tags`` (tag, seq); ``partition``: the
  partition index; ``job_id``: the job index; ``queue``: the queue
  index — the first of these given drives the page (in that order). With any other filter
  too, a page is a walk of at most :data:`JOB_SCAN` of that range's newest rows, checked
  against the others. When that walk ends before the page is full, the page is shorter and its
  cursor continues after the rows it looked at.

Counts are exact only when asked for (``cap=None``: every entry of the status index is read).
With a ``cap`` each (kind, status) is counted up to the cap along the status index, and a count
that reached it is :attr:`OccurrenceCount.capped` (the true number is at least that); a job's
counts with a cap are those of its newest ``cap`` occurrences (all capped when it has more).
"""

from __future__ import annotations

import re
from typing import Any

from ... import contract
from ...errors import InvalidArgument
from ...models import Occurrence, OccurrenceCount, OccurrencePage
from .. import inputs, rows
from ..tx import Row, Tx
from .base import OperationsBase

__all__ = ["JOB_SCAN", "MAX_COUNT_CAP", "ListingOperations"]

# Rows of one job a filtered page looks at, at most.
JOB_SCAN = 10_000
MAX_COUNT_CAP = 1_000_000
# Above every seq: the first page's bound (seq is a 63-bit integer on both stores).
_TOP = 2**62


class ListingOperations(OperationsBase):
    """Pages and counts of occurrences (see the module docstring)."""

    def list_occurrences(
        self,
        *,
        status: str | None = None,
        job_id: str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        partition: str | None = None,
        key: str | None = None,
        tag: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> OccurrencePage:
        self._assert_open()
        wanted = inputs.normalize_status(status)
        job = inputs.normalize_optional_identifier(job_id, "jobId")
        kind_filter = inputs.normalize_optional_identifier(kind, "kind", 128)
        queue_filter = None if queue is None else contract.normalize_queue_name(queue)
        partition_filter = None if partition is None else contract.normalize_partition(partition)
        trigger_key = None if key is None else inputs.idempotency_trigger_key(key)
        tag_filter = None if tag is None else inputs.normalize_tag(tag, "tag")
        bounded = inputs.normalize_page_limit(limit)
        after_seq, after_id = _parse_cursor(cursor)
        # The filter whose index range drives the page (the narrowest first), and the row
        # columns the others are checked against along it.
        given = [
            (name, column, value)
            for name, column, value in (
                ("key", "trigger_key", trigger_key),
                ("tag", "tags_json", tag_filter),
                ("partition", "partition_key", partition_filter),
                ("job", "job_id", job),
                ("queue", "queue", queue_filter),
            )
            if value is not None
        ]

        def body(tx: Tx) -> tuple[list[Occurrence], int | None]:
            before = after_seq
            if after_id is not None:
                found = tx.one("seq_of_occurrence", {"occurrence_id": after_id})
                if found is None:
                    raise InvalidArgument(
                        "the cursor's occurrence is gone (pruned): list from the first page",
                        details={"field": "cursor"},
                    )
                before = int(found["seq"])
            params: dict[str, Any] = {
                "before_seq": _TOP if before is None else before,
                "limit": bounded + 1,
                "status": wanted,
                "kind": kind_filter,
                "job_id": job,
                "queue": queue_filter,
                "partition": partition_filter,
                "trigger_key": trigger_key,
                "tag": tag_filter,
            }
            if given:
                driver = given[0][0]
                others = {column: value for _, column, value in given[1:]}
                others.update(
                    (column, value)
                    for column, value in (("status", wanted), ("kind", kind_filter))
                    if value is not None
                )
                if others:
                    return self._walk(tx, driver, params, others, bounded)
                rows = tx.all(f"list_occurrences_by_{driver}", params)
            elif kind_filter is not None and wanted is not None:
                rows = tx.all("list_occurrences_by_status_kind", params)
            elif kind_filter is not None:
                rows = self._kind_rows(tx, params)
            elif wanted is not None:
                rows = self._status_rows(tx, params)
            else:
                rows = tx.all("list_occurrences_all", params)
            more = len(rows) > bounded
            rows = rows[:bounded]
            return self._occurrences(tx, rows), int(rows[-1]["seq"]) if more else None

        items, next_seq = self._read(body)
        return OccurrencePage(tuple(items), None if next_seq is None else f"s{next_seq}")

    def _status_rows(self, tx: Tx, params: dict[str, Any]) -> list[Row]:
        """The newest ``limit`` rows in one status: per kind in it, its newest ``limit`` seqs
        (one range of the status index each), merged."""
        seqs: list[int] = []
        for row in tx.all("kinds_in_status", {"status": params["status"]}):
            found = tx.all("seqs_by_status_kind", {**params, "kind": row["kind"]})
            seqs.extend(int(item["seq"]) for item in found)
        seqs.sort(reverse=True)
        return _by_seqs(tx, seqs[: params["limit"]])

    def _kind_rows(self, tx: Tx, params: dict[str, Any]) -> list[Row]:
        """The newest ``limit`` rows of one kind: per status, its newest ``limit`` seqs of the
        kind (one range of the status index each, seven at most), merged."""
        seqs: list[int] = []
        for status in contract.OCCURRENCE_STATUSES:
            found = tx.all("seqs_by_status_kind", {**params, "status": status})
            seqs.extend(int(item["seq"]) for item in found)
        seqs.sort(reverse=True)
        return _by_seqs(tx, seqs[: params["limit"]])

    def _walk(
        self,
        tx: Tx,
        driver: str,
        params: dict[str, Any],
        others: dict[str, Any],
        bounded: int,
    ) -> tuple[list[Occurrence], int | None]:
        """A page of the ``driver`` filter's range whose rows also match ``others`` (row column:
        value): a walk of at most :data:`JOB_SCAN` rows of the range below the cursor."""
        scanned = tx.all(f"{driver}_rows_scan", {**params, "limit": JOB_SCAN})
        matches = [int(row["seq"]) for row in scanned if _matches(row, others)]
        if len(matches) > bounded:
            page, next_seq = matches[:bounded], matches[bounded - 1]
        elif len(scanned) == JOB_SCAN:
            # The walk stopped at its bound: the page ends here, the next one goes on after it.
            page, next_seq = matches, int(scanned[-1]["seq"])
        else:
            page, next_seq = matches, None
        return self._occurrences(tx, _by_seqs(tx, page)), next_seq

    def count_occurrences(
        self, *, job_id: str | None = None, cap: int | None = None
    ) -> list[OccurrenceCount]:
        self._assert_open()
        job = inputs.normalize_optional_identifier(job_id, "jobId")
        bound = _count_cap(cap)

        def body(tx: Tx) -> list[OccurrenceCount]:
            if bound is None:
                if job is None:
                    found = tx.all("count_occurrences")
                else:
                    found = tx.all("count_occurrences_of_job", {"job_id": job})
                return [OccurrenceCount(r["kind"], r["status"], int(r["n"])) for r in found]
            if job is not None:
                found = tx.all("count_recent_of_job", {"job_id": job, "cap": bound})
                capped = sum(int(r["n"]) for r in found) >= bound
                return [OccurrenceCount(r["kind"], r["status"], int(r["n"]), capped) for r in found]
            counts = []
            for status in contract.OCCURRENCE_STATUSES:
                for r in tx.all("count_status_by_kind", {"status": status, "cap": bound}):
                    n = int(r["n"])
                    counts.append(OccurrenceCount(r["kind"], status, n, n >= bound))
            return counts

        return sorted(self._read(body), key=lambda c: (c.kind, c.status))

    def list_dead_letters(
        self, *, job_id: str | None = None, limit: int = contract.DEFAULT_HISTORY_LIMIT
    ) -> list[Occurrence]:
        self._assert_open()
        bounded = contract.normalize_history_limit(limit)
        job = inputs.normalize_optional_identifier(job_id, "jobId")
        params: dict[str, Any] = {"limit": bounded}
        query = "list_dead_letters"
        if job is not None:
            query, params["job_id"] = "list_dead_letters_by_job", job
        return self._read(lambda tx: self._occurrences(tx, tx.all(query, params)))


def _matches(row: Row, others: dict[str, Any]) -> bool:
    """Whether a walked row has every other filter's value (a tag: among its tags)."""
    for column, value in others.items():
        if column == "tags_json":
            if value not in rows.read_tags(row["tags_json"]):
                return False
        elif row[column] != value:
            return False
    return True


def _by_seqs(tx: Tx, seqs: list[int]) -> list[Row]:
    """The rows of ``seqs``, newest (largest seq) first."""
    if not seqs:
        return []
    found = tx.all("occurrences_by_seqs", {"seqs": tx.id_list(seqs)})
    return sorted(found, key=lambda row: -int(row["seq"]))


def _count_cap(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 1 <= value <= MAX_COUNT_CAP:
        raise InvalidArgument(
            "cap must be an integer from 1 to 1,000,000", details={"field": "cap"}
        )
    return value


# "s<seq>", as list_occurrences returns it; "<created_at ms>.occ_<hex>" from earlier versions
# (paged on from that occurrence while it exists).
_CURSOR = re.compile(r"s([0-9]{1,19})|[0-9]{1,16}\.(occ_[0-9a-f]+)")


def _parse_cursor(cursor: object) -> tuple[int | None, str | None]:
    if cursor is None:
        return None, None
    if not isinstance(cursor, str):
        raise InvalidArgument("cursor must be a string from a previous page")
    found = _CURSOR.fullmatch(cursor)
    if found is None or (found[1] is not None and int(found[1]) > _TOP):
        raise InvalidArgument(
            "cursor is not one a previous page returned", details={"field": "cursor"}
        )
    return (int(found[1]), None) if found[1] is not None else (None, found[2])
