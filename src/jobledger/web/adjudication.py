"""The adjudication pages (SPEC §9): open cases, one case with its evidence, and the decision.

``GET /adjudication`` lists occurrences whose outcome is unknown and that nobody has decided;
``GET /adjudication/{occurrence}`` shows one case — what ran, its payload and last error, the
evidence digest — and, for a signed-in operator, the decision form; ``POST /adjudication/decide``
records the decision. The form carries the evidence digest the page showed, so a case that
changed after the page was loaded is refused (``SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT``)
rather than decided on stale evidence; the operator must tick that they checked the external
system, and give a reason. The decision is authorized like every action (sign-in, same origin,
the session's CSRF token) and recorded with ``actor="web:<user>"``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..contract import normalize_identifier
from ..errors import InvalidArgument, SchedulerError
from ..models import MAX_CASES, AdjudicationCase
from .actions import _authorize, _done, _failure, _reason, _refused
from .core import Dashboard, HTTPProblem, first

__all__ = ["case_page", "cases_page", "decide"]

PAGE_SIZE = 100


async def cases_page(dash: Dashboard, request: Request) -> Response:
    page = dash.page(request)

    def read() -> tuple[int, list[AdjudicationCase]]:
        return dash.store.now(), dash.store.adjudication_cases(limit=PAGE_SIZE)

    now, cases = await dash.call(read)
    return dash.render(
        page,
        "adjudication.html",
        cases=cases,
        more=len(cases) == PAGE_SIZE,
        cap=MAX_CASES,
        now=now,
        nav="adjudication",
    )


async def case_page(dash: Dashboard, request: Request) -> Response:
    page = dash.page(request)
    name = request.path_params["occurrence_id"]

    def read() -> tuple[int, AdjudicationCase | None]:
        occurrence_id = dash.store.resolve_occurrence_id(name)
        return dash.store.now(), dash.store.get_adjudication_case(occurrence_id)

    try:
        now, case = await dash.call(read)
    except InvalidArgument as exc:
        raise HTTPProblem(404, "Not found", f"There is no occurrence {name!r}.") from exc
    if case is None:
        raise HTTPProblem(404, "Not found", f"There is no occurrence {name!r}.")
    return dash.render(page, "adjudication_case.html", case=case, now=now, nav="adjudication")


async def decide(dash: Dashboard, request: Request) -> Response:
    """Record ``decision`` (applied | not_applied) on case ``id`` at ``evidence_digest``, with
    ``reason`` and the ``checked`` confirmation."""
    identity, form = await _authorize(dash, request)
    occurrence_id = (first(form, "id") or "").strip()
    decision = first(form, "decision") or ""
    digest = (first(form, "evidence_digest") or "").strip()
    try:
        occurrence_id = normalize_identifier(occurrence_id, "occurrence id")
    except InvalidArgument as exc:
        raise HTTPProblem(400, "Bad request", "Name the occurrence to decide.") from exc
    if decision not in ("applied", "not_applied"):
        raise HTTPProblem(400, "Decision needed", "Choose applied or not applied.")
    if first(form, "checked") != "yes":
        raise HTTPProblem(
            400,
            "Confirmation needed",
            "Tick that you checked the external system: the decision cannot be undone.",
        )
    reason = _reason(form)
    default = f"/adjudication/{occurrence_id}"
    try:
        decided = await dash.call(
            dash.store.adjudicate,
            occurrence_id=occurrence_id,
            decision=decision,
            evidence_digest=digest,
            reason=reason,
            actor=identity.actor,
        )
    except SchedulerError as exc:
        message = _failure(exc)
        return _refused(
            dash,
            request,
            form,
            subject=occurrence_id,
            text=f"Not decided ({exc.code}): {message}",
            exc=exc,
            message=message,
            default=default,
        )
    effect = (
        "settled succeeded without running its handler"
        if decision == "applied"
        else "will run exactly once more"
    )
    notes = [
        {
            "level": "success",
            "text": f"Recorded {decision} for {decided.occurrence_id} as {identity.actor}: "
            f"it {effect}.",
        }
    ]
    payload = {"ok": True, "case": decided.to_dict(), "actor": identity.actor}
    return _done(dash, request, form, notes=notes, payload=payload, default=default)
