"""``jobledger.contrib.asgi.lifespan`` (issue 32 item 11): an ASGI application (Starlette here;
FastAPI takes the same ``lifespan=``) runs an in-process worker from startup to a graceful
shutdown, on both stores."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

import jobledger
from jobledger.contrib import fastapi as fastapi_contrib
from jobledger.contrib.asgi import lifespan, running_worker

POLL = timedelta(milliseconds=50)
WAIT = timedelta(seconds=20)


@pytest.fixture
def jobs(any_target: str) -> Iterator[jobledger.App]:
    app = jobledger.App(any_target, name="shop", authorize=jobledger.allow_all)
    with app:
        yield app


def orders_api(jobs: jobledger.App, **lifespan_options: object) -> Starlette:
    async def place(request: Request) -> JSONResponse:
        order = await request.json()
        occurrence = await jobs.enqueue_async("receipt", payload=order)
        return JSONResponse(await jobs.result_async(occurrence.id, timeout=WAIT))

    return Starlette(
        routes=[Route("/orders", place, methods=["POST"])],
        lifespan=lifespan(jobs, **lifespan_options),  # type: ignore[arg-type]
    )


def test_the_worker_runs_from_startup_to_shutdown(jobs):
    @jobs.handler("receipt")
    def receipt(ctx: jobledger.JobContext) -> dict:
        return {"receipt": ctx.payload["order"], "worker": ctx.owner_id}

    jobs.ensure_job("receipt", "receipt")
    api = orders_api(jobs, concurrency=2, poll_interval=POLL)
    with TestClient(api) as client:
        worker = api.state.jobledger_worker
        assert worker.running
        answers = [client.post("/orders", json={"order": n}).json() for n in range(3)]
    assert [answer["receipt"] for answer in answers] == [0, 1, 2]
    assert {answer["worker"] for answer in answers} == {worker.runtime.owner_id}
    assert not worker.running  # stopped with the application
    assert worker.summary.statuses == {"succeeded": 3}
    assert jobs.store.lease_holders() == []


def test_shutdown_lets_a_running_handler_finish(jobs):
    started, go_on = threading.Event(), threading.Event()

    @jobs.handler("slow")
    def slow(ctx: jobledger.JobContext) -> str:
        started.set()
        assert go_on.wait(20)
        return "done"

    jobs.ensure_job("slow", "slow")
    api = Starlette(lifespan=lifespan(jobs, poll_interval=POLL, grace_period=timedelta(seconds=20)))
    with TestClient(api):
        occurrence = jobs.enqueue("slow")
        assert started.wait(20)
        threading.Timer(0.2, go_on.set).start()  # finishes during the shutdown's grace period
    assert jobs.get_occurrence(occurrence.id).status == "succeeded"
    assert api.state.jobledger_worker.summary.released == []


def test_a_worker_that_cannot_start_fails_the_startup(jobs):
    api = Starlette(lifespan=lifespan(jobs))  # no handler registered: nothing to run
    with pytest.raises(jobledger.SchedulerError), TestClient(api):
        pass


def test_running_worker_composes_with_a_lifespan_of_ones_own(jobs):
    @jobs.handler("receipt")
    def receipt(ctx: jobledger.JobContext) -> str:
        return "ok"

    jobs.ensure_job("receipt", "receipt")
    seen: list[str] = []

    @contextlib.asynccontextmanager
    async def own(app: Starlette) -> AsyncIterator[None]:
        seen.append("up")
        async with running_worker(jobs, poll_interval=POLL) as worker:
            app.state.worker = worker
            yield
        seen.append("down")

    api = Starlette(lifespan=own)
    with TestClient(api):
        occurrence = jobs.enqueue("receipt")
        assert jobs.result(occurrence.id, timeout=WAIT) == "ok"
    assert seen == ["up", "down"]
    assert not api.state.worker.running
    assert fastapi_contrib.lifespan is lifespan
