"""Operator actions (requeue, cancel, enable/disable, pause/resume a queue) and signing in and
out.

Every action goes through :func:`_authorize`: refused in read-only mode (403), without a
signed-in user (401), from another site (``Origin``/``Sec-Fetch-Site``, 403) or without the
session's CSRF token (403; bearer-token requests need none — browsers never send that header
by themselves). The store call carries ``actor="web:<user>"``, so the audit log says who did it,
and a reason where the store takes one. A browser gets a 303 back to the page it came from with
a note saying what happened; a script that asks for JSON gets JSON.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..errors import Conflict, InvalidArgument, NotFound, RevisionConflict, SchedulerError
from ..models import Occurrence
from .core import (
    TOO_MANY,
    Dashboard,
    HTTPProblem,
    Page,
    first,
    json_response,
    limited_names,
    read_form,
    wants_json,
)
from .security import SESSION_COOKIE, TOKEN_USER, Identity

__all__ = ["cancel", "login", "login_form", "logout", "requeue", "set_enabled", "set_paused"]

MAX_REQUEUE = 200
LINKED_IN_NOTE = 10  # requeued occurrences the note after a requeue links to by name


def _same_origin(request: Request) -> bool:
    """False for a request a browser says came from another site.

    ``Sec-Fetch-Site`` (sent by every current browser) decides when present: it does not depend
    on the ``Host`` header, which a reverse proxy may rewrite. Otherwise an ``Origin`` must name
    this host (or the ``X-Forwarded-Host`` a proxy passed on). Scripts send neither.
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    hosts = {request.headers.get("host", ""), request.headers.get("x-forwarded-host", "")}
    return origin != "null" and urlsplit(origin).netloc in hosts - {""}


async def _authorize(dash: Dashboard, request: Request) -> tuple[Identity, dict[str, list[str]]]:
    if dash.settings.read_only:
        raise HTTPProblem(403, "Read-only", "This dashboard is read-only: actions are disabled.")
    identity = dash.identify(request)
    if not identity.authenticated:
        raise HTTPProblem(401, "Not signed in", "Sign in to act on jobs and occurrences.")
    if not _same_origin(request):
        raise HTTPProblem(403, "Refused", "The request came from another site.")
    form = await read_form(request)
    submitted = first(form, "csrf_token") or request.headers.get("x-csrf-token")
    if not dash.guard.csrf_ok(identity, submitted):
        raise HTTPProblem(
            403,
            "Form expired",
            "The form did not carry this session's CSRF token. Reload the page and try again.",
        )
    return identity, form


def _reason(form: dict[str, list[str]]) -> str:
    reason = (first(form, "reason") or "").strip()
    if not reason:
        raise HTTPProblem(400, "Reason needed", "Say why: the reason goes into the audit log.")
    return reason


def _done(
    dash: Dashboard,
    request: Request,
    form: dict[str, list[str]],
    *,
    notes: list[dict[str, Any]],
    payload: dict[str, Any],
    default: str,
) -> Response:
    if wants_json(request):
        return json_response(payload, status=200 if payload.get("ok", True) else 409)
    target = dash.local_path(request, first(form, "next"), default=default)
    return dash.with_flash(request, RedirectResponse(target, status_code=303), notes)


def _failure(exc: SchedulerError) -> str:
    if isinstance(exc, NotFound | Conflict | InvalidArgument):
        return exc.message
    raise exc


def _refused(
    dash: Dashboard,
    request: Request,
    form: dict[str, list[str]],
    *,
    subject: str,
    text: str,
    exc: SchedulerError,
    message: str,
    default: str,
) -> Response:
    """An action the store refused: a flash note for people, ``ok: false`` for scripts."""
    return _done(
        dash,
        request,
        form,
        notes=[{"level": "error", "text": text}],
        payload={"ok": False, "id": subject, "code": exc.code, "message": message},
        default=default,
    )


async def requeue(dash: Dashboard, request: Request) -> Response:
    """Requeue the dead letters named ``id`` (``<occurrence id>:<fence>``, one or many) with
    ``reason`` (and ``revive_children=1``: their descendants cancelled because of them follow
    them again). The fence is the evidence the operator saw: a dead letter that changed since
    (requeued by someone else, say) is refused rather than requeued twice."""
    identity, form = await _authorize(dash, request)
    reason = _reason(form)
    # An outcome-unknown dead letter is refused by the store (it is adjudicated instead, SPEC
    # §9): the dashboard offers no override.
    revive = first(form, "revive_children") == "1"
    wanted: list[tuple[str, int]] = []
    for value in form.get("id", []):
        occurrence_id, _, fence = value.rpartition(":")
        if not occurrence_id or not fence.isdigit():
            raise HTTPProblem(400, "Bad request", f"Not an occurrence id and fence: {value!r}.")
        wanted.append((occurrence_id, int(fence)))
    if not wanted:
        raise HTTPProblem(400, "Nothing selected", "Tick the dead letters to requeue.")
    if len(wanted) > MAX_REQUEUE:
        raise HTTPProblem(400, "Too many", f"Requeue at most {MAX_REQUEUE} at a time.")

    def run() -> tuple[list[Occurrence], list[dict[str, str]]]:
        done, failed = [], []
        for occurrence_id, fence in dict.fromkeys(wanted):
            try:
                done.append(
                    dash.store.requeue_dead_letter(
                        occurrence_id=occurrence_id,
                        expected_fence=fence,
                        reason=reason,
                        actor=identity.actor,
                        revive_children=revive,
                    )
                )
            except SchedulerError as exc:
                failed.append({"id": occurrence_id, "code": exc.code, "message": _failure(exc)})
        return done, failed

    done, failed = await dash.call(run)
    notes: list[dict[str, Any]] = []
    if done:
        noun = "dead letter" if len(done) == 1 else "dead letters"
        ids = [occ.id for occ in done]
        notes.append(
            {
                "level": "success",
                "text": f"Requeued {len(done)} {noun} as {identity.actor}.",
                # Links to follow each one as it runs again (the page shown next is the list
                # they were picked from, where they no longer appear).
                "occurrences": ids[:LINKED_IN_NOTE],
                "more": len(ids) - len(ids[:LINKED_IN_NOTE]),
            }
        )
    notes += [
        {"level": "error", "text": f"{item['id']} was not requeued: {item['message']}"}
        for item in failed
    ]
    payload = {
        "ok": not failed,
        "requeued": [occ.id for occ in done],
        "failed": failed,
        "actor": identity.actor,
    }
    return _done(dash, request, form, notes=notes, payload=payload, default="/dead-letters")


async def cancel(dash: Dashboard, request: Request) -> Response:
    """Cancel the live occurrence ``id`` with ``reason``."""
    identity, form = await _authorize(dash, request)
    occurrence_id = (first(form, "id") or "").strip()
    if not occurrence_id:
        raise HTTPProblem(400, "Bad request", "Name the occurrence to cancel.")
    reason = _reason(form)
    try:
        cancelled = await dash.call(
            dash.store.cancel_occurrence,
            occurrence_id=occurrence_id,
            actor=identity.actor,
            reason=reason,
        )
    except SchedulerError as exc:
        message = _failure(exc)
        return _refused(
            dash,
            request,
            form,
            subject=occurrence_id,
            text=f"Not cancelled: {message}",
            exc=exc,
            message=message,
            default="/occurrences",
        )
    notes = [{"level": "success", "text": f"Cancelled {cancelled.id} as {identity.actor}."}]
    payload = {"ok": True, "id": cancelled.id, "status": cancelled.status}
    return _done(dash, request, form, notes=notes, payload=payload, default="/occurrences")


async def set_enabled(dash: Dashboard, request: Request) -> Response:
    """Enable or disable job ``job_id`` (``enabled``: ``true``/``false``) at ``revision``."""
    identity, form = await _authorize(dash, request)
    job_id = (first(form, "job_id") or "").strip()
    enabled = first(form, "enabled")
    revision = first(form, "revision") or ""
    if not job_id or enabled not in ("true", "false") or not revision.isdigit():
        raise HTTPProblem(400, "Bad request", "Send job_id, enabled (true/false) and revision.")
    wanted = enabled == "true"
    verb = "Enabled" if wanted else "Disabled"
    try:
        updated = await dash.call(
            dash.store.update_job,
            job_id,
            expected_revision=int(revision),
            patch={"enabled": wanted},
            actor=identity.actor,
        )
    except SchedulerError as exc:
        if isinstance(exc, RevisionConflict):
            message = "the job changed since the page was loaded; check it and try again"
            text = f"{job_id} was not changed: {message}."
        else:
            message = _failure(exc)
            text = f"{job_id} was not changed: {message}"
        return _refused(
            dash,
            request,
            form,
            subject=job_id,
            text=text,
            exc=exc,
            message=message,
            default="/jobs",
        )
    notes = [{"level": "success", "text": f"{verb} {updated.id} as {identity.actor}."}]
    payload = {"ok": True, "id": updated.id, "enabled": updated.enabled}
    payload["revision"] = updated.revision
    return _done(dash, request, form, notes=notes, payload=payload, default="/jobs")


async def set_paused(dash: Dashboard, request: Request) -> Response:
    """Pause (``paused=true``, with ``reason``) or resume (``paused=false``) queue ``queue``."""
    identity, form = await _authorize(dash, request)
    name = (first(form, "queue") or "").strip()
    paused = first(form, "paused")
    if not name or paused not in ("true", "false"):
        raise HTTPProblem(400, "Bad request", "Send queue and paused (true/false).")
    try:
        if paused == "true":
            reason = _reason(form)
            queue = await dash.call(
                dash.store.pause_queue, name, reason=reason, actor=identity.actor
            )
            text = f"Paused queue {queue.name} as {identity.actor}: no worker claims from it now."
        else:
            queue = await dash.call(dash.store.resume_queue, name, actor=identity.actor)
            text = f"Resumed queue {queue.name} as {identity.actor}."
    except SchedulerError as exc:
        message = _failure(exc)
        return _refused(
            dash,
            request,
            form,
            subject=name,
            text=f"Queue {name} was not changed: {message}",
            exc=exc,
            message=message,
            default="/queues",
        )
    notes = [{"level": "success", "text": text}]
    payload = {"ok": True, "queue": queue.name, "paused": queue.paused}
    return _done(dash, request, form, notes=notes, payload=payload, default="/queues")


# -- signing in and out ---------------------------------------------------------------------


async def login_form(dash: Dashboard, request: Request) -> Response:
    """The sign-in form. It never signs anyone in by itself: a token in the query string would
    land in access logs and browser history. For the token ``jobledger web`` made for this run
    (``login_link``), the form carries ``data-fragment-login``, and the page's script posts a
    ``#token=…`` from the printed link's fragment, which browsers never send to the server."""
    identity = dash.identify(request)
    target = dash.local_path(request, request.query_params.get("next"))
    return dash.render(
        Page(request, identity),
        "login.html",
        next=target,
        error=None,
        fragment_login=dash.settings.login_link,
        now=None,
        nav="login",
    )


def _signed_in(dash: Dashboard, request: Request, user: str, target: str) -> Response:
    value, _identity = dash.guard.new_session(user)
    response = RedirectResponse(target, status_code=303)
    dash.set_session(request, response, value)
    return response


async def login(dash: Dashboard, request: Request) -> Response:
    """Sign in with the form's ``token`` or ``user`` and ``password``: a session and a 303 to
    ``next``; wrong credentials are a 401 and start (or double) this address's wait for this
    user name, and while it lasts the answer is a 429 without checking anything. A token is
    never limited."""
    if not _same_origin(request):
        raise HTTPProblem(403, "Refused", "The request came from another site.")
    form = await read_form(request)
    target = dash.local_path(request, first(form, "next"))
    token = first(form, "token") or ""
    user = (first(form, "user") or "").strip()
    password = first(form, "password") or ""
    names = limited_names(user)
    wait = dash.sign_in_wait(request, names)
    if wait:
        response = _login_page(
            dash,
            request,
            target,
            status=429,
            error=f"{TOO_MANY} {wait} s.",
        )
        response.headers["Retry-After"] = str(wait)
        return response
    if token and dash.guard.check_token(token):
        return _signed_in(dash, request, TOKEN_USER, target)
    if user and dash.guard.check_password(user, password):
        dash.limits.succeeded(dash.client_address(request), names)
        return _signed_in(dash, request, user, target)
    if token or user:
        dash.limits.failed(dash.client_address(request), names)
    return _login_page(dash, request, target, status=401, error="Those credentials are not valid.")


def _login_page(
    dash: Dashboard, request: Request, target: str, *, status: int, error: str
) -> Response:
    return dash.render(
        Page(request, Identity(None, "anonymous")),
        "login.html",
        status=status,
        next=target,
        error=error,
        fragment_login=dash.settings.login_link,
        now=None,
        nav="login",
    )


async def logout(dash: Dashboard, request: Request) -> Response:
    """End the session on the server (every copy of its cookie stops working) and clear the
    cookie; bearer and basic requests have no session, only the redirect."""
    identity = dash.identify(request)
    if identity.via == "session":
        form = await read_form(request)
        if not _same_origin(request) or not dash.guard.csrf_ok(identity, first(form, "csrf_token")):
            raise HTTPProblem(403, "Form expired", "Reload the page and sign out again.")
        dash.guard.end_session(request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse(dash.url(request, "/login"), status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=dash.cookie_path(request))
    return dash.with_flash(request, response, [{"level": "info", "text": "Signed out."}])
