"""``create_app``: the dashboard as an ASGI app (Starlette), to serve or mount.

Why this stack: Starlette is a small ASGI toolkit (routing, requests, responses — no ORM, no
settings module) that mounts into any ASGI service; Jinja2 renders every page on the server;
htmx (shipped in ``static/``, 0BSD licence) adds live refresh by polling without a build step;
charts are inline SVG drawn in Python. Nothing is fetched from the internet at run time, and a
strict Content-Security-Policy allows only the app's own scripts and styles.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from ..errors import InvalidArgument, SchedulerError
from ..store import open_store
from ..store.base import Store
from . import actions, adjudication, pages
from .core import (
    STATIC,
    Dashboard,
    HTTPProblem,
    Redirect,
    error_problem,
)
from .headers import SecurityHeaders, StaticAssets
from .settings import WebSettings

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["create_app"]

_PHRASES = {404: "Not found", 405: "Method not allowed", 400: "Bad request"}


def create_app(
    store_or_target: Store | str | Path,
    settings: WebSettings,
    *,
    metrics_registry: CollectorRegistry | None = None,
) -> ASGIApp:
    """The dashboard for ``store_or_target`` as an ASGI app, run as ``settings`` say.

    ``store_or_target`` is an open :class:`~jobledger.Store` (left open) or anything
    :func:`~jobledger.open_store` takes — opened with ``migrate=False``, so the dashboard never
    creates or upgrades a database, and closed when the app shuts down.

    ``settings`` (:class:`~jobledger.web.WebSettings`) holds the credentials, read-only and
    public-read modes, the title, the cookie key and the durations: acting (requeue, cancel,
    enable/disable) needs a ``token`` and/or ``basic_auth``, and people sign in with them on the
    login page. ``metrics_registry`` adds a registry to ``/metrics`` (e.g. a
    :class:`~jobledger.metrics.PrometheusObserver`'s registry in the same process).

    Mount it anywhere (``Mount("/jobs", app=create_app(...))``); links and cookies follow the
    mount point.
    """
    if not isinstance(settings, WebSettings):
        raise InvalidArgument("create_app needs a WebSettings", details={"field": "settings"})
    if isinstance(store_or_target, Store):
        store, owns = store_or_target, False
    elif isinstance(store_or_target, str | Path):
        store, owns = open_store(store_or_target, migrate=False), True
    else:
        raise InvalidArgument("create_app needs a Store, a path or a database URL")
    dash = Dashboard(store, settings, owns_store=owns)

    def route(handler: Callable[[Dashboard, Request], Awaitable[Response]]) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(dash, request)
            except Redirect as redirect:
                return redirect.response()
            except HTTPProblem as problem:
                return dash.problem_response(request, problem)
            except SchedulerError as exc:
                return dash.problem_response(request, error_problem(exc))

        endpoint.__name__ = handler.__name__
        return endpoint

    async def metrics_endpoint(dash: Dashboard, request: Request) -> Response:
        return await _metrics(dash, request, metrics_registry)

    async def health(dash: Dashboard, request: Request) -> Response:
        await dash.call(dash.store.now)
        return PlainTextResponse("ok\n")

    routes = [
        Route("/", route(pages.overview), name="overview"),
        Route("/jobs", route(pages.jobs), name="jobs"),
        Route("/jobs/enabled", route(actions.set_enabled), methods=["POST"], name="set_enabled"),
        Route("/jobs/{job_id:path}", route(pages.job), name="job"),
        Route("/occurrences", route(pages.occurrences), name="occurrences"),
        Route("/occurrences/cancel", route(actions.cancel), methods=["POST"], name="cancel"),
        Route("/occurrences/{occurrence_id:path}", route(pages.occurrence), name="occurrence"),
        Route("/dead-letters", route(pages.dead_letters), name="dead_letters"),
        Route("/queues", route(pages.queues), name="queues"),
        Route("/queues/paused", route(actions.set_paused), methods=["POST"], name="set_paused"),
        Route("/queues/{name:path}", route(pages.queue), name="queue"),
        Route("/dead-letters/requeue", route(actions.requeue), methods=["POST"], name="requeue"),
        Route("/adjudication", route(adjudication.cases_page), name="adjudication"),
        Route(
            "/adjudication/decide",
            route(adjudication.decide),
            methods=["POST"],
            name="adjudicate",
        ),
        Route(
            "/adjudication/{occurrence_id:path}",
            route(adjudication.case_page),
            name="adjudication_case",
        ),
        Route("/login", route(actions.login_form), name="login_form"),
        Route("/login", route(actions.login), methods=["POST"], name="login"),
        Route("/logout", route(actions.logout), methods=["POST"], name="logout"),
        Route("/healthz", route(health), name="health"),
        Mount("/static", app=StaticAssets(STATIC), name="static"),
    ]
    if settings.metrics:
        routes.append(Route("/metrics", route(metrics_endpoint), name="metrics"))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        title = _PHRASES.get(exc.status_code, "Error")
        message = {
            404: "There is no page here. Use the menu above.",
            405: "This address does not take that method.",
        }.get(exc.status_code, str(exc.detail))
        return dash.problem_response(request, HTTPProblem(exc.status_code, title, message))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            dash.close()

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.dashboard = dash
    return SecurityHeaders(app)


async def _metrics(dash: Dashboard, request: Request, extra: CollectorRegistry | None) -> Response:
    page_identity = dash.identify(request)
    if not dash.can_read(page_identity):
        raise HTTPProblem(
            401, "Not signed in", "Scrape with the dashboard's token or basic auth.",
            headers=dash.challenge(),
        )  # fmt: skip
    try:
        from prometheus_client.exposition import choose_encoder
    except ImportError as exc:  # pragma: no cover - prometheus-client is part of the web extra
        raise HTTPProblem(
            404, "Metrics unavailable", "Install prometheus-client (pip install 'jobledger[web]')."
        ) from exc
    from ..metrics import metrics_registry

    if dash.metrics_cache is None:
        dash.metrics_cache = metrics_registry(dash.store, registry=extra)
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    body = await dash.call(encoder, dash.metrics_cache)
    return Response(body, media_type=None, headers={"Content-Type": content_type})
