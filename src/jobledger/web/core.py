"""The parts every page and action share: rendering, who is asking, URLs, errors.

:class:`Dashboard` holds one app's store, settings, :class:`~jobledger.web.security.Guard` and
Jinja environment. Pages (``pages.py``) and actions (``actions.py``) are plain functions of a
dashboard and a request; ``app.py`` wires them into Starlette routes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..contract import escape_surrogates
from ..errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    SchedulerError,
    StorageUnavailable,
    StoreClosed,
)
from ..store.base import Store
from . import formatting
from .limits import SignInLimits, client_key
from .security import FLASH_COOKIE, SESSION_COOKIE, TOKEN_USER, AuthError, Guard, Identity
from .settings import WebSettings

__all__ = ["Dashboard", "HTTPProblem", "Page", "Redirect"]

logger = logging.getLogger("jobledger.web")

HERE = Path(__file__).parent
STATIC = HERE / "static"
TEMPLATES = HERE / "templates"
MAX_FORM_BYTES = 256 * 1024


class HTTPProblem(Exception):
    """An error page with a status, a title and a sentence saying what to do."""

    def __init__(
        self, status: int, title: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message
        self.headers = dict(headers or {})


@dataclass(slots=True)
class Page:
    """What a handler knows about the request it serves."""

    request: Request
    identity: Identity
    flash: list[dict[str, Any]] = field(default_factory=list)


def _asset_version(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:10]


class Dashboard:
    """One dashboard: the store it reads, its settings and the shared machinery."""

    def __init__(self, store: Store, settings: WebSettings, *, owns_store: bool) -> None:
        self.store = store
        self.settings = settings
        self.owns_store = owns_store
        self.guard = Guard(settings)
        self.limits = SignInLimits(settings.clock)
        self.asset_version = _asset_version(STATIC)
        self.env = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(["html"]),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            utc=formatting.utc,
            iso=formatting.iso,
            duration=formatting.duration,
            pretty_json=formatting.pretty_json,
            short_id=formatting.short_id,
            breakable=formatting.breakable,
            status_label=formatting.status_label,
        )
        self.env.globals.update(
            badge=formatting.badge,
            quote=_quote,
            ms=formatting.epoch_ms,
            local=formatting.local_time,
        )
        self.metrics_cache: Any = None  # the /metrics registry, made on first scrape

    # -- who is asking ----------------------------------------------------------------------

    def identify(self, request: Request) -> Identity:
        """Who is asking. Credentials in an ``Authorization`` header are a sign-in attempt:
        backed off like the login form's (429 while this address waits for this user name,
        unchecked); a wrong one counts as a failure, a right one clears the wait."""
        authorization = request.headers.get("authorization")
        if not authorization:
            return self.guard.identify(request.headers, request.cookies)
        users = limited_names(self.guard.claimed_user(authorization))
        self.refuse_while_limited(request, users)
        try:
            identity = self.guard.identify(request.headers, request.cookies)
        except AuthError as exc:
            self.limits.failed(self.client_address(request), users)
            raise HTTPProblem(401, "Not signed in", f"{exc}.", headers=self.challenge()) from exc
        if users:
            self.limits.succeeded(self.client_address(request), users)
        return identity

    @staticmethod
    def client_address(request: Request) -> str:
        """The address half of the sign-in back-off's key (behind a proxy: the address uvicorn
        took from ``X-Forwarded-For``, when ``--forwarded-allow-ips`` trusts it)."""
        return client_key(request.client.host if request.client else None)

    def sign_in_wait(self, request: Request, users: list[str]) -> int:
        """Whole seconds a sign-in attempt for ``users`` from here must wait (0: go ahead)."""
        wait_ms = self.limits.wait_ms(self.client_address(request), users)
        return -(-wait_ms // 1000)

    def refuse_while_limited(self, request: Request, users: list[str]) -> None:
        seconds = self.sign_in_wait(request, users)
        if seconds:
            raise HTTPProblem(
                429,
                "Too many sign-in attempts",
                f"{TOO_MANY} {seconds} s.",
                headers={"Retry-After": str(seconds)},
            )

    def challenge(self) -> dict[str, str]:
        schemes = []
        if self.settings.token is not None:
            schemes.append('Bearer realm="jobledger"')
        if self.settings.basic_auth:
            schemes.append('Basic realm="jobledger", charset="UTF-8"')
        return {"WWW-Authenticate": ", ".join(schemes)} if schemes else {}

    def can_read(self, identity: Identity) -> bool:
        return self.settings.reads_open or identity.authenticated

    def can_act(self, identity: Identity) -> bool:
        return not self.settings.read_only and identity.authenticated

    def page(self, request: Request) -> Page:
        """Who is asking for a read page (raises when they may not read)."""
        identity = self.identify(request)
        if not self.can_read(identity):
            raise self.sign_in_required(request)
        flash = self.guard.decode_flash(request.cookies.get(FLASH_COOKIE, ""))
        return Page(request, identity, flash)

    def sign_in_required(self, request: Request) -> HTTPProblem | Redirect:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        login = self.url(request, "/login", next=self.local_path(request, target))
        if request.headers.get("hx-request"):
            return Redirect(login, htmx=True)
        if _wants_html(request):
            return Redirect(login)
        return HTTPProblem(
            401, "Not signed in", "Sign in to read this dashboard.", headers=self.challenge()
        )

    # -- URLs -------------------------------------------------------------------------------

    @staticmethod
    def root(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def url(self, request: Request, path: str, **query: Any) -> str:
        """``path`` under the app's mount point, with the non-empty ``query`` values."""
        pairs = [(key, value) for key, value in query.items() if value not in (None, "")]
        suffix = f"?{urlencode(pairs, doseq=True)}" if pairs else ""
        return f"{self.root(request)}{path}{suffix}"

    def local_path(self, request: Request, target: str | None, default: str = "/") -> str:
        """``target`` if it is a path inside this dashboard (so a ``next`` field can never send
        anyone to another site), else ``default`` under the mount point."""
        root = self.root(request)
        fallback = f"{root}{default}"
        if not target or not target.startswith("/") or target.startswith("//"):
            return fallback
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or "\\" in target:
            return fallback
        if root and not (parts.path == root or parts.path.startswith(root + "/")):
            return fallback
        return target

    # -- rendering --------------------------------------------------------------------------

    def render(self, page: Page, template: str, status: int = 200, **data: Any) -> Response:
        request = page.request
        context = {
            "title": self.settings.title,
            "identity": page.identity,
            "can_act": self.can_act(page.identity),
            "read_only": self.settings.read_only,
            "has_credentials": self.settings.has_credentials,
            "token_login": self.settings.token is not None,
            "password_login": bool(self.settings.basic_auth),
            "flash": page.flash,
            "path": request.url.path,
            "root": self.root(request),
            "url": lambda path, **query: self.url(request, path, **query),
            "static": lambda name: f"{self.root(request)}/static/{name}?v={self.asset_version}",
            "csrf": page.identity.csrf or "",
            "refresh_seconds": self.settings.refresh_seconds,
            "metrics_enabled": self.settings.metrics,
            **data,
        }
        now = data.get("now")
        if isinstance(now, int):
            context["when"] = lambda ms: formatting.when(ms, now)
            context["age"] = lambda ms: formatting.age(ms, now)
        html = self.env.get_template(template).render(context)
        response = HTMLResponse(html, status_code=status)
        if page.flash:
            response.delete_cookie(FLASH_COOKIE, path=self.cookie_path(request))
        return response

    def problem_response(self, request: Request, problem: HTTPProblem) -> Response:
        if not _wants_html(request):
            return JSONResponse(
                {"error": problem.title, "message": problem.message},
                status_code=problem.status,
                headers=problem.headers,
            )
        try:
            identity = self.guard.identify(request.headers, request.cookies)
        except AuthError:
            identity = Identity(None, "anonymous")
        page = Page(request, identity)
        response = self.render(
            page,
            "error.html",
            status=problem.status,
            problem=problem,
            now=None,
        )
        response.headers.update(problem.headers)
        return response

    def cookie_path(self, request: Request) -> str:
        return self.root(request) or "/"

    def with_flash(
        self, request: Request, response: Response, notes: list[dict[str, Any]]
    ) -> Response:
        if notes:
            response.set_cookie(
                FLASH_COOKIE,
                self.guard.encode_flash(notes),
                max_age=60,
                path=self.cookie_path(request),
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    def set_session(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(
            SESSION_COOKIE,
            value,
            max_age=self.settings.session_ttl_ms // 1000,
            path=self.cookie_path(request),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    # -- calling the store ------------------------------------------------------------------

    async def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a (blocking) store call off the event loop."""
        return await run_in_threadpool(function, *args, **kwargs)

    def close(self) -> None:
        if self.owns_store:
            self.store.close()


class Redirect(Exception):
    """Raised to answer with a redirect (303), or an ``HX-Redirect`` for htmx polling."""

    def __init__(self, location: str, *, htmx: bool = False) -> None:
        super().__init__(location)
        self.location = location
        self.htmx = htmx

    def response(self) -> Response:
        if self.htmx:
            return Response(status_code=200, headers={"HX-Redirect": self.location})
        return RedirectResponse(self.location, status_code=303)


TOO_MANY = "Too many failed sign-ins for this user from here: try again in"


def limited_names(*claimed: str | None) -> list[str]:
    """The user names a sign-in attempt is backed off under. Never the token's: a wait on it
    would let anyone lock every script and Prometheus scrape out, and a right token must always
    work — so the token is never limited at all (it is at least 16 characters; the one
    ``jobledger web`` makes is random)."""
    return [name for name in claimed if name and name != TOKEN_USER]


def _wants_html(request: Request) -> bool:
    """Browsers navigating ask for HTML; scripts (curl, Prometheus) get JSON or plain text."""
    return "text/html" in request.headers.get("accept", "")


def wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _quote(value: str) -> str:
    return quote(value, safe="")


def error_problem(exc: SchedulerError) -> HTTPProblem:
    """The page for a jobledger error that escaped a handler."""
    if isinstance(exc, NotFound):
        return HTTPProblem(404, "Not found", exc.message)
    if isinstance(exc, InvalidArgument):
        return HTTPProblem(400, "Bad request", exc.message)
    if isinstance(exc, Conflict):
        return HTTPProblem(409, "Conflict", exc.message)
    if isinstance(exc, StorageUnavailable | StoreClosed):
        return HTTPProblem(503, "Store unavailable", f"{exc.message} Try again shortly.")
    logger.error("dashboard request failed: %s", exc, exc_info=exc)
    return HTTPProblem(500, "Something went wrong", f"{exc.code}: {exc.message}")


async def read_form(request: Request) -> dict[str, list[str]]:
    """An ``application/x-www-form-urlencoded`` body as ``{name: [values…]}`` (at most 256 KiB).

    Parsed here, without ``python-multipart``: the dashboard's forms never upload files.
    """
    from urllib.parse import parse_qs

    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in ("", "application/x-www-form-urlencoded"):
        raise HTTPProblem(
            415, "Unsupported form", "Send the form as application/x-www-form-urlencoded."
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise HTTPProblem(413, "Form too large", "Send fewer items at a time.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HTTPProblem(413, "Form too large", "Send fewer items at a time.")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPProblem(400, "Bad request", "The form is not UTF-8.") from exc
    return parse_qs(text, keep_blank_values=True, max_num_fields=2000)


def first(form: Mapping[str, list[str]], name: str) -> str | None:
    values = form.get(name)
    return values[0] if values else None


def json_response(data: Any, status: int = 200) -> Response:
    return Response(
        escape_surrogates(json.dumps(data, ensure_ascii=False, sort_keys=True)),
        status_code=status,
        media_type="application/json",
    )
