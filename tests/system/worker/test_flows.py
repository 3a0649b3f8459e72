"""Flows through the App (SPEC §10): after=, app.flow(), ctx.parents, failure rules, on both
stores, run with ``run_until_idle`` (no worker thread, no sleeps)."""

from __future__ import annotations

from typing import Any

import pytest

import jobledger
from jobledger.testing import FakeClock, run_until_idle


@pytest.fixture
def app(any_target: str, clock: FakeClock):
    with jobledger.App(any_target, name="flows", clock=clock, authorize=jobledger.allow_all) as app:
        yield app


def _thumbnails(app: jobledger.App, seen: list[dict[str, Any]]) -> None:
    @app.handler("thumbnail")
    def thumbnail(ctx: jobledger.JobContext) -> dict[str, Any]:
        if ctx.payload.get("broken"):
            raise ValueError("cannot read image")
        return {"thumb": ctx.payload["src"] + ".thumb"}

    @app.handler("summary")
    def summary(ctx: jobledger.JobContext) -> int:
        seen.append(ctx.parents)
        return sum(1 for result in ctx.parents.values() if result is not None)

    app.create_job("thumbnail", "thumbnail", max_attempts=1)
    app.create_job("summary", "summary")


def test_fan_out_then_fan_in_through_a_flow(app, clock: FakeClock):
    seen: list[dict[str, Any]] = []
    _thumbnails(app, seen)
    with app.flow() as flow:
        images = [flow.enqueue("thumbnail", payload={"src": f"img{i}"}) for i in range(100)]
        join = flow.enqueue("summary", after=images)
    assert join.status == "blocked" and join.parents == tuple(i.id for i in images)
    assert [o.id for o in flow.occurrences] == [i.id for i in images] + [join.id]
    assert flow.occurrences[-1].status == "blocked"
    results = run_until_idle(app, limit=200)
    assert [r.occurrence.id for r in results if r.occurrence].count(join.id) == 1
    assert seen == [{image.id: {"thumb": f"img{i}.thumb"} for i, image in enumerate(images)}]
    assert app.get_occurrence(join.id).result == 100
    history = [e.type for e in app.history(occurrence_id=join.id)]
    assert history.count("occurrence_unblocked") == 1


def test_run_policy_sees_none_for_a_failed_parent(app, clock: FakeClock):
    seen: list[dict[str, Any]] = []
    _thumbnails(app, seen)
    good = app.enqueue("thumbnail", payload={"src": "a"})
    bad = app.enqueue("thumbnail", payload={"src": "b", "broken": True})
    join = app.enqueue("summary", after=[good, bad.id], on_parent_failure="run")
    run_until_idle(app)
    assert app.get_occurrence(bad.id).status == "dead_letter"
    assert seen == [{good.id: {"thumb": "a.thumb"}, bad.id: None}]
    assert app.get_occurrence(join.id).result == 1


def test_cancel_policy_cascades_down_the_graph(app, clock: FakeClock):
    seen: list[dict[str, Any]] = []
    _thumbnails(app, seen)
    with app.flow() as flow:
        bad = flow.enqueue("thumbnail", payload={"src": "b", "broken": True})
        middle = flow.enqueue("summary", after=[bad])
        last = flow.enqueue("summary", after=[middle])
    run_until_idle(app)
    assert seen == []
    for child in (middle, last):
        found = app.get_occurrence(child.id)
        assert found.status == "cancelled"
        assert found.last_error["code"] == "parent_failed"


def test_an_abandoned_flow_writes_nothing(app, clock: FakeClock):
    _thumbnails(app, [])
    planned: list[jobledger.Occurrence] = []

    def abandon() -> None:
        with app.flow() as flow:
            planned.append(flow.enqueue("thumbnail", payload={"src": "x"}))
            planned.append(flow.enqueue("summary", after=[planned[0]]))
            raise RuntimeError("changed my mind")

    with pytest.raises(RuntimeError):
        abandon()
    assert len(planned) == 2
    assert app.store.get_occurrence(planned[0].id) is None
    assert app.store.count_occurrences() == []


def _flow_with_unknown_parent(app: jobledger.App, missing: str) -> None:
    with app.flow() as flow:
        flow.enqueue("thumbnail", payload={"src": "x"})
        flow.enqueue("summary", after=[missing])


def test_unknown_parents_are_refused(app, clock: FakeClock):
    _thumbnails(app, [])
    missing = "occ_" + "a" * 64
    with pytest.raises(jobledger.SchedulerError) as info:
        app.enqueue("summary", after=[missing])
    assert info.value.code == "SCHEDULER_NOT_FOUND"
    with pytest.raises(jobledger.SchedulerError) as info:
        _flow_with_unknown_parent(app, missing)
    assert info.value.code == "SCHEDULER_NOT_FOUND"
    assert info.value.details["index"] == 1
    assert app.store.count_occurrences() == []
    with pytest.raises(jobledger.SchedulerError) as info:
        app.enqueue("summary", after="occ_123")  # type: ignore[arg-type]
    assert info.value.code == "SCHEDULER_INVALID_ARGUMENT"
    with pytest.raises(jobledger.SchedulerError) as info:
        app.flow(conn=object()).__enter__()  # type: ignore[arg-type]
    assert info.value.code == "SCHEDULER_INVALID_ARGUMENT"


def _flow_racing_a_job_update(app: jobledger.App) -> None:
    with app.flow() as flow:
        flow.enqueue("thumbnail", payload={"src": "x"})
        job = app.get_job("thumbnail")
        app.store.update_job("thumbnail", expected_revision=job.revision, patch={"max_attempts": 2})


def test_a_flow_refuses_when_a_job_changed_meanwhile(app, clock: FakeClock):
    _thumbnails(app, [])
    with pytest.raises(jobledger.SchedulerError) as info:
        _flow_racing_a_job_update(app)
    assert info.value.code == "SCHEDULER_FLOW_CONFLICT"
    assert app.store.count_occurrences() == []


def test_a_keyed_flow_node_is_found_again(app, clock: FakeClock):
    _thumbnails(app, [])
    with app.flow() as flow:
        first = flow.enqueue("thumbnail", payload={"src": "x"}, key="img-x")
    with app.flow() as again:
        second = again.enqueue("thumbnail", payload={"src": "x"}, key="img-x")
        join = again.enqueue("summary", after=[second])
    assert second.id == first.id and second.deduplicated
    assert again.occurrences[0].deduplicated
    assert app.get_occurrence(join.id).parents == (first.id,)


def test_enqueue_async_takes_parents_like_enqueue(app, clock: FakeClock):
    import asyncio

    seen: list[dict[str, Any]] = []
    _thumbnails(app, seen)
    parent = app.enqueue("thumbnail", payload={"src": "a"})
    child = asyncio.run(app.enqueue_async("summary", after=[parent], on_parent_failure="run"))
    assert child.status == "blocked"
    assert child.parents == (parent.id,)
    assert child.on_parent_failure == "run"
    run_until_idle(app)
    assert seen == [{parent.id: {"thumb": "a.thumb"}}]


def test_flow_async_is_the_async_twin_of_flow(app, clock: FakeClock):
    """Issue 32 item 10: app.flow had no async twin."""
    import asyncio

    seen: list[dict[str, Any]] = []
    _thumbnails(app, seen)

    async def build() -> tuple[Any, list[jobledger.Occurrence]]:
        async with app.flow_async() as flow:
            images = [await flow.enqueue("thumbnail", payload={"src": f"img{i}"}) for i in range(3)]
            join = await flow.enqueue("summary", after=images)
            assert flow.occurrences == []  # nothing written before the block ends
        return join, flow.occurrences

    join, written = asyncio.run(build())
    assert [o.status for o in written] == ["queued"] * 3 + ["blocked"]
    run_until_idle(app)
    assert app.get_occurrence(join.id).result == 3

    async def abandoned() -> None:
        async with app.flow_async() as flow:
            await flow.enqueue("thumbnail", payload={"src": "never"})
            raise RuntimeError("changed my mind")

    with pytest.raises(RuntimeError):
        asyncio.run(abandoned())
    assert sum(c.count for c in app.store.count_occurrences(job_id="thumbnail")) == 3
