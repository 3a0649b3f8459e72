"""``serve``: run the dashboard with uvicorn (what ``jobledger web`` calls).

Binds to 127.0.0.1 by default. A non-loopback address is refused unless actions are protected
(a token or basic auth) or the dashboard is read-only. On loopback with no credentials at all,
a random token is generated for this run and a sign-in link printed — the one command a
newcomer needs (``jobledger web jobs.sqlite3``) still never serves an unauthenticated action.
"""

from __future__ import annotations

import copy
import ipaddress
import logging
import re
import sys
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from ..errors import InvalidArgument
from ..store.base import Store
from .app import create_app
from .settings import WebSettings

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "is_loopback", "serve"]

logger = logging.getLogger("jobledger.web")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class RedactSecrets(logging.Filter):
    """Blanks ``token=`` and ``password=`` query values in uvicorn's access log lines.

    The dashboard never takes credentials from a query string, but a stale bookmark or a
    hand-typed URL may still carry one, and an access log is read by more people than the
    dashboard's users."""

    PATTERN = re.compile(r"(?i)([?&](?:token|password)=)[^&#\s]*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                self.PATTERN.sub(r"\1[redacted]", arg) if isinstance(arg, str) else arg
                for arg in record.args
            )
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's own logging set-up, with :class:`RedactSecrets` on its access log."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_secrets"] = {"()": RedactSecrets}
    access = config["loggers"].setdefault("uvicorn.access", {})
    access["filters"] = [*access.get("filters", []), "redact_secrets"]
    return config


def serve(
    target: Store | str | Path,
    settings: WebSettings | None = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    forwarded_allow_ips: str | None = None,
    log_level: str = "info",
    out: TextIO | None = None,
) -> None:
    """Serve the dashboard for ``target`` on ``host:port`` until interrupted (Ctrl-C).

    ``settings`` as for :func:`~jobledger.web.create_app`; without them, a token is made for
    this run (``WebSettings(login_link=True)``) and a sign-in link printed to ``out`` (default:
    stderr). Refuses a non-loopback ``host`` without configured credentials unless the
    dashboard is read-only. ``forwarded_allow_ips`` — the reverse proxies (comma-separated
    addresses, or ``*``) whose ``X-Forwarded-Proto``/``-For`` headers are believed, so that
    cookies are marked ``Secure`` behind a proxy that terminates TLS.
    """
    import uvicorn

    if settings is None:
        settings = WebSettings(login_link=True)
    if type(port) is not int or not 0 <= port <= 65535:
        raise InvalidArgument("port must be a TCP port (0–65535)", details={"field": "port"})
    if not is_loopback(host) and settings.login_link:
        raise InvalidArgument(
            f"refusing to serve the dashboard on {host} without authentication: pass a token "
            "or basic auth, or read_only=True (or bind to 127.0.0.1)",
            details={"field": "host"},
        )
    app = create_app(target, settings)
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    stream = out or sys.stderr
    print(f"jobledger web: serving {base}/", file=stream)
    if settings.login_link:
        assert settings.token is not None  # made by WebSettings for this run
        # In the fragment: browsers never send it, so no access log or proxy sees the token;
        # the login page's script posts it (app.js) and wipes it from the address bar.
        print(
            f"jobledger web: sign in with {base}/login#token={quote(settings.token)} "
            "(a token made for this run; configure a token or basic auth to choose your own)",
            file=stream,
        )
    elif not settings.has_credentials:
        print("jobledger web: read-only and open to anyone who can reach it", file=stream)
    stream.flush()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        server_header=False,
        proxy_headers=forwarded_allow_ips is not None,
        forwarded_allow_ips=forwarded_allow_ips,
        lifespan="on",
        log_config=log_config(),
    )
    uvicorn.Server(config).run()
