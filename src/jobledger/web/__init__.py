"""The jobledger dashboard: a server-rendered web UI over the :class:`~jobledger.Store` API.

Needs the optional extra (``pip install 'jobledger[web]'``: Starlette, Jinja2, uvicorn,
prometheus-client); the core package never imports this one.

* :func:`create_app` — the dashboard as an ASGI app, to serve or mount in your own service;
* :func:`serve` — run it with uvicorn (``jobledger web``), bound to 127.0.0.1 by default.

Pages: overview (counts, throughput and failure rate over the last hour, oldest due work,
workers and their leases), jobs (schedules in words, next fires, enable/disable), one job
(``explain``), occurrences (filters, paging, live refresh), one occurrence (its audit
timeline, cancel, requeue) and dead letters (requeue one or many, with a reason). Plus
``/metrics`` (Prometheus) and ``/healthz``. See ``docs/web.md``.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the jobledger dashboard needs the 'web' extra: pip install 'jobledger[web]'"
    ) from exc

from .app import create_app
from .server import DEFAULT_HOST, DEFAULT_PORT, serve
from .settings import WebSettings

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "WebSettings", "create_app", "serve"]
