"""Headers every response carries: a strict Content-Security-Policy and friends, and who may
cache what — the versioned static files for a week, everything else never (``no-store``).

Pages carry the session's CSRF token and show who is signed in, so no page, redirect, error or
JSON answer may be kept by a browser or a shared cache. Only :class:`StaticAssets` marks its own
answers cacheable, and only it knows they are static files: the router matched its mount, so a
page whose path merely contains ``/static/`` (a job id, or a dashboard mounted at ``/static``)
is never mistaken for one.
"""

from __future__ import annotations

from pathlib import Path

from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SecurityHeaders", "StaticAssets"]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

STATIC_CACHE_CONTROL = b"public, max-age=604800, immutable"


class StaticAssets:
    """The ``/static`` mount: the packaged script, stylesheet and icon, cacheable for a week.

    Their URLs carry the files' content hash (``?v=``), so a cached copy is never stale. Only
    this app, reached through the router's match of the mount itself, marks answers cacheable:
    pages whose path merely contains ``/static/`` (a job id, or a dashboard mounted at
    ``/static``) carry the session's CSRF token and stay ``no-store``, as do this mount's own
    errors (a 404 page shows who is signed in).
    """

    def __init__(self, directory: Path) -> None:
        self.files = StaticFiles(directory=directory)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_cacheable(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (200, 304):
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() != b"cache-control"
                ]
                headers.append((b"cache-control", STATIC_CACHE_CONTROL))
                message = {**message, "headers": headers}
            await send(message)

        await self.files(scope, receive, send_cacheable)


class SecurityHeaders:
    """ASGI middleware: a strict Content-Security-Policy and friends on every response, and
    ``Cache-Control: no-store`` on every response that did not set its own (only
    :class:`StaticAssets` does): pages, sign-in and sign-out answers, errors, JSON."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                extra = [
                    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"x-frame-options", b"DENY"),
                    (b"cache-control", b"no-store"),
                ]
                headers += [(name, value) for name, value in extra if name not in names]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
