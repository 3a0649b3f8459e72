"""The read pages: overview, jobs, one job (explain), occurrences, one occurrence, dead letters.

Each handler checks who may read (:meth:`Dashboard.page`), validates its query parameters
(a bad one is a 400 page that says which), reads through the store off the event loop, and
renders a template. Filters and paging live in the query string, so every view has a URL.

An occurrence is named in a URL by its id or by a unique start of it (``/occurrences/b858a7b1``,
or ``/occurrences?id=…`` from the page's "open" box): the page redirects to the whole id's URL
(``Store.resolve_occurrence_id``); a start shared by several is a 400 page naming a few.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from ..contract import LIVE_STATUSES, normalize_identifier, normalize_queue_name
from ..errors import InvalidArgument
from ..models import COUNT_CAP, Occurrence
from ..store.base import Store
from . import formatting, views
from .core import Dashboard, HTTPProblem, Redirect, json_response
from .flowgraph import render_flow_svg

__all__ = [
    "dead_letters",
    "job",
    "jobs",
    "occurrence",
    "occurrences",
    "overview",
    "queue",
    "queues",
]

JOBS_PER_PAGE = 50
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
# A whole occurrence id as the store writes it: its page needs no lookup first.
_WHOLE_ID = re.compile(r"occ_[0-9a-f]{64}")


def _bad(message: str) -> HTTPProblem:
    return HTTPProblem(400, "Bad request", message)


def _identifier(request: Request, name: str, label: str) -> str | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    try:
        return normalize_identifier(value, label)
    except InvalidArgument as exc:
        raise _bad(f"The {label} filter is not valid: {exc.message}.") from exc


def _limit(request: Request, default: int = DEFAULT_PAGE_SIZE) -> int:
    raw = request.query_params.get("limit")
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE_SIZE:
        raise _bad(f"limit must be a whole number from 1 to {MAX_PAGE_SIZE}.")
    return int(raw)


def _event_id(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise _bad(f"{name} must be a positive event id.")
    return int(raw)


async def overview(dash: Dashboard, request: Request) -> Response:
    page = dash.page(request)
    data = await dash.call(views.overview, dash.store)
    return dash.render(
        page, "overview.html", data=data, now=data.now, statuses=views.STATUSES, nav="overview"
    )


async def jobs(dash: Dashboard, request: Request) -> Response:
    page = dash.page(request)
    after = _identifier(request, "after", "after")

    def read() -> tuple[int, list[views.JobRow], bool]:
        now = dash.store.now()
        listed = dash.store.list_jobs(after=after, limit=JOBS_PER_PAGE + 1)
        more = len(listed) > JOBS_PER_PAGE
        return now, views.job_rows(dash.store, listed[:JOBS_PER_PAGE], now), more

    now, rows, more = await dash.call(read)
    return dash.render(
        page,
        "jobs.html",
        rows=rows,
        now=now,
        after=after,
        next_after=rows[-1].job.id if more and rows else None,
        nav="jobs",
    )


async def job(dash: Dashboard, request: Request) -> Response:
    page = dash.page(request)
    job_id = request.path_params["job_id"]
    try:
        key = normalize_identifier(job_id, "job id")
    except InvalidArgument as exc:
        raise HTTPProblem(404, "Not found", f"There is no job {job_id!r}.") from exc
    data = await dash.call(views.job_page, dash.store, key)
    if request.query_params.get("format") == "json":
        return json_response(data.explanation.to_dict())
    return dash.render(
        page,
        "job.html",
        data=data,
        job=data.job,
        explanation=data.explanation,
        now=formatting.epoch_ms(data.explanation.now),
        zone=views.schedule_zone(data.explanation.trigger),
        nav="jobs",
    )


def _occurrence_url(dash: Dashboard, request: Request, occurrence_id: str, **query: Any) -> str:
    return dash.url(request, "/occurrences/" + quote(occurrence_id, safe=""), **query)


def _resolve(store: Store, name: str) -> str:
    """The id ``name`` (an id or a unique start of one) names; a name that cannot be one is
    "no such occurrence" (a URL that leads nowhere), an ambiguous one a 400 naming a few."""
    try:
        return store.resolve_occurrence_id(name)
    except InvalidArgument as exc:
        if exc.code == "SCHEDULER_AMBIGUOUS_ID":
            raise HTTPProblem(400, "More than one occurrence", exc.message) from exc
        raise HTTPProblem(
            404,
            "Not found",
            f"There is no occurrence {name!r}: give its id or a unique start of it (at least 8 "
            "hex digits).",
        ) from exc


async def occurrences(dash: Dashboard, request: Request) -> Response:
    page = dash.page(request)
    wanted = (request.query_params.get("id") or "").strip()
    if wanted:  # the "open an occurrence" box
        found = await dash.call(_resolve, dash.store, wanted)
        raise Redirect(_occurrence_url(dash, request, found))
    status = request.query_params.get("status") or None
    if status is not None and status not in views.STATUSES:
        raise _bad(f"status must be one of: {', '.join(views.STATUSES)}.")
    job_id = _identifier(request, "job", "job")
    kind = _identifier(request, "kind", "kind")
    queue_name = _identifier(request, "queue", "queue")
    partition = _identifier(request, "partition", "partition")
    key = _identifier(request, "key", "key")
    tag = _identifier(request, "tag", "tag")
    limit = _limit(request)
    cursor = request.query_params.get("cursor") or None
    live = cursor is None and request.query_params.get("live") != "0"

    def read() -> tuple[int, Any, list[str]]:
        now = dash.store.now()
        try:
            listed = dash.store.list_occurrences(
                status=status,
                job_id=job_id,
                kind=kind,
                queue=queue_name,
                partition=partition,
                key=key,
                tag=tag,
                limit=limit,
                cursor=cursor,
            )
        except InvalidArgument as exc:
            if (exc.details or {}).get("field") == "cursor":
                raise _bad(f"The page cursor is not valid ({exc.message}); start again.") from exc
            raise _bad(f"A filter is not valid: {exc.message}.") from exc
        # The kinds to filter by: a skip scan of the status index (each counted up to 1 row).
        kinds = sorted({row.kind for row in dash.store.count_occurrences(cap=1)})
        return now, listed, kinds

    now, listed, kinds = await dash.call(read)
    filters = {
        "status": status,
        "job": job_id,
        "kind": kind,
        "queue": queue_name,
        "partition": partition,
        "key": key,
        "tag": tag,
    }
    if limit != DEFAULT_PAGE_SIZE:
        filters["limit"] = str(limit)
    return dash.render(
        page,
        "occurrences.html",
        items=listed.items,
        next_cursor=listed.next_cursor,
        cursor=cursor,
        filters=filters,
        kinds=sorted(set(kinds) | ({kind} if kind else set())),
        statuses=views.STATUSES,
        live=live,
        now=now,
        nav="occurrences",
    )


async def occurrence(dash: Dashboard, request: Request) -> Response:
    page = dash.page(request)
    key = request.path_params["occurrence_id"]
    before = _event_id(request, "before")
    if not _WHOLE_ID.fullmatch(key):  # a start of an id: to the whole id's page
        found = await dash.call(_resolve, dash.store, key)
        raise Redirect(_occurrence_url(dash, request, found, before=before))

    def read() -> tuple[int, views.OccurrencePageView]:
        return dash.store.now(), views.occurrence_page(dash.store, key, before)

    now, data = await dash.call(read)
    current: Occurrence = data.occurrence
    graph_svg = (
        None
        if data.graph is None
        else render_flow_svg(
            data.graph, current.id, lambda key: _occurrence_url(dash, request, key)
        )
    )
    return dash.render(
        page,
        "occurrence.html",
        data=data,
        graph_svg=graph_svg,
        occ=current,
        live_status=current.status in LIVE_STATUSES,
        now=now,
        nav="occurrences",
    )


async def dead_letters(dash: Dashboard, request: Request) -> Response:
    page = dash.page(request)
    job_id = _identifier(request, "job", "job")
    limit = _limit(request)

    def read() -> tuple[int, list[Occurrence], int, bool, set[str]]:
        now = dash.store.now()
        items = dash.store.list_dead_letters(job_id=job_id, limit=limit)
        counts = [
            row
            for row in dash.store.count_occurrences(job_id=job_id, cap=COUNT_CAP)
            if row.status == "dead_letter"
        ]
        total = sum(row.count for row in counts)
        # Outcome-unknown dead letters nobody decided: adjudicated, not requeued (SPEC §9).
        undecided = {
            item.id
            for item in items
            if str((item.last_error or {}).get("code", "")).endswith("_OUTCOME_UNKNOWN")
            and (case := dash.store.get_adjudication_case(item.id)) is not None
            and case.eligible
        }
        return now, items, total, any(row.capped for row in counts), undecided

    now, items, total, capped, undecided = await dash.call(read)
    return dash.render(
        page,
        "dead_letters.html",
        undecided=undecided,
        items=items,
        total=total,
        capped=capped,
        limit=limit,
        job=job_id,
        now=now,
        nav="dead_letters",
    )


async def queues(dash: Dashboard, request: Request) -> Response:
    page = dash.page(request)

    def read() -> tuple[int, list[views.QueueRow]]:
        return dash.store.now(), views.queue_rows(dash.store)

    now, rows = await dash.call(read)
    if request.query_params.get("format") == "json":
        return json_response(
            {
                "queues": [
                    {**row.depth.to_json(), "holdingBack": [r.to_json() for r in row.holding_back]}
                    for row in rows
                ]
            }
        )
    return dash.render(page, "queues.html", rows=rows, now=now, nav="queues")


async def queue(dash: Dashboard, request: Request) -> Response:
    """One queue: its limits, depth, running and held-back work, and its newest occurrences."""
    page = dash.page(request)
    name = request.path_params["name"]
    try:
        key = normalize_queue_name(name)
    except InvalidArgument as exc:
        raise HTTPProblem(404, "Not found", f"There is no queue {name!r}.") from exc

    def read() -> tuple[int, views.QueuePageView]:
        return dash.store.now(), views.queue_page(dash.store, key)

    now, data = await dash.call(read)
    if request.query_params.get("format") == "json":
        return json_response(
            {
                **data.row.depth.to_json(),
                "holdingBack": [reason.to_json() for reason in data.row.holding_back],
                "running": [o.id for o in data.running.items],
                "waiting": [
                    {"id": o.id, "reasons": [reason.to_json() for reason in reasons]}
                    for o, reasons in data.waiting
                ],
                "recent": [o.id for o in data.recent.items],
            }
        )
    return dash.render(
        page, "queue.html", data=data, queue=data.row.depth.queue, now=now, nav="queues"
    )
