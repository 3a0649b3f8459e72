"""``app.flow(conn=...)``: a whole graph written inside the caller's own transaction (SPEC §8,
§10), on every synchronous connection kind (sqlite3 on a shared file; psycopg, SQLAlchemy
Connection and Session, and Django on PostgreSQL), on real databases."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.testing import run_until_idle
from tests.system.transactions.drivers import Caller, Driver, outside_transaction


def _events(app: jobledger.App, occurrence_id: str) -> list[str]:
    return [event.type for event in app.store.history(occurrence_id=occurrence_id)]


def _count(app: jobledger.App) -> int:
    return sum(count.count for count in app.store.count_occurrences(job_id="confirm"))


def _small_graph(app: jobledger.App, conn: Any) -> None:
    with app.flow(conn=conn) as flow:
        a = flow.enqueue("confirm", payload={"n": 1})
        flow.enqueue("confirm", after=[a])


def _flow_racing_its_own_key(app: jobledger.App, caller: Caller, seen: list[str]) -> None:
    with app.flow(conn=caller.native) as flow:
        flow.enqueue("confirm", payload={"n": 1})
        seen.append(flow.enqueue("confirm", payload={"n": 2}, key="k").id)
        # The key is taken meanwhile, for another instant: the commit finds that occurrence,
        # not the one the builder planned.
        seen.append(caller.enqueue(payload={"n": 2}, key="k", delay_ms=60_000).id)


def _flow_with_unknown_parent(app: jobledger.App, conn: Any) -> None:
    with app.flow(conn=conn) as flow:
        flow.enqueue("confirm", payload={"n": 1})
        flow.enqueue("confirm", after=["occ_" + "a" * 64])


def _abandoned_flow(app: jobledger.App, conn: Any, seen: list[str]) -> None:
    with app.flow(conn=conn) as flow:
        a = flow.enqueue("confirm", payload={"n": 1})
        seen.append(a.id)
        flow.enqueue("confirm", after=[a])
        raise RuntimeError("the app gave up on the graph")


def test_a_commit_writes_the_whole_graph_with_blocked_children(sync_driver: Driver) -> None:
    app = sync_driver.app
    ran: list[Any] = []

    @app.handler("send_confirmation")
    def send(ctx: jobledger.JobContext) -> Any:
        ran.append((ctx.payload, sorted(ctx.parents.values(), key=str)))
        return ctx.payload

    caller = sync_driver.begin()
    caller.order(1)
    # A parent enqueued earlier in the same transaction: the flow's commit finds it there.
    earlier = caller.enqueue(payload={"n": 0})
    with app.flow(conn=caller.native) as flow:
        a = flow.enqueue("confirm", payload={"n": 1}, key="a")
        b = flow.enqueue("confirm", payload={"n": 2})
        join = flow.enqueue("confirm", payload={"n": 3}, after=[earlier, a, b])
    assert [o.id for o in flow.occurrences] == [a.id, b.id, join.id]
    assert [o.status for o in flow.occurrences] == ["queued", "queued", "blocked"]
    # Nothing is visible to another connection before the caller commits.
    assert all(app.store.get_occurrence(o.id) is None for o in (earlier, a, b, join))
    assert _count(app) == 0
    caller.order(2)
    caller.commit()
    assert sync_driver.orders() == [1, 2]
    stored = app.get_occurrence(join.id)
    assert stored.status == "blocked" and set(stored.parents) == {earlier.id, a.id, b.id}
    for occurrence in (earlier, a, b, join):
        assert _events(app, occurrence.id) == ["occurrence_enqueued"]
    run_until_idle(app)
    assert ran[-1] == ({"n": 3}, [{"n": 0}, {"n": 1}, {"n": 2}])
    assert app.get_occurrence(join.id).status == "succeeded"


def test_a_rollback_leaves_nothing_of_the_flow(sync_driver: Driver) -> None:
    app = sync_driver.app
    caller = sync_driver.begin()
    caller.order(1)
    with app.flow(conn=caller.native) as flow:
        a = flow.enqueue("confirm", payload={"n": 1}, key="a")
        join = flow.enqueue("confirm", after=[a])
    caller.rollback()
    assert sync_driver.orders() == []
    assert _count(app) == 0
    assert _events(app, a.id) == [] and _events(app, join.id) == []
    again = app.enqueue("confirm", payload={"n": 1}, key="a")
    assert not again.deduplicated  # the key was never used


def test_a_connection_outside_a_transaction_is_refused_and_nothing_is_written(
    sync_driver: Driver,
) -> None:
    app = sync_driver.app
    conn, close, _ = outside_transaction(sync_driver)
    try:
        with pytest.raises(jobledger.SchedulerError) as refused:
            _small_graph(app, conn)
        assert refused.value.code == "SCHEDULER_INVALID_ARGUMENT"
        assert refused.value.details["field"] == "conn"
    finally:
        close()
    assert _count(app) == 0


def test_kinds_a_flow_cannot_take_are_refused_before_the_block(sync_driver: Driver) -> None:
    app = sync_driver.app
    with pytest.raises(jobledger.SchedulerError) as refused:
        app.flow(conn=object()).__enter__()
    assert refused.value.code == "SCHEDULER_INVALID_ARGUMENT"
    if sync_driver.name == "sqlite3":
        return
    import psycopg

    aconn = asyncio.run(psycopg.AsyncConnection.connect(sync_driver.target))
    with pytest.raises(jobledger.SchedulerError) as refused:
        app.flow(conn=aconn).__enter__()
    assert refused.value.details["reason"] == "async_connection"
    assert "app.flow" in str(refused.value)
    asyncio.run(aconn.close())


def test_a_flow_conflict_leaves_the_callers_transaction_usable(sync_driver: Driver) -> None:
    app = sync_driver.app
    caller = sync_driver.begin()
    caller.order(1)
    seen: list[str] = []
    with pytest.raises(jobledger.SchedulerError) as conflict:
        _flow_racing_its_own_key(app, caller, seen)
    planned, taken = seen
    assert conflict.value.code == "SCHEDULER_FLOW_CONFLICT"
    assert conflict.value.details == {"index": 1, "expected": planned, "actual": taken}
    caller.order(2)
    after = caller.enqueue(payload={"n": 3})
    caller.commit()
    assert sync_driver.orders() == [1, 2]
    assert _count(app) == 2  # the key's occurrence and the one after the conflict; no flow node
    assert app.store.get_occurrence(taken) is not None
    assert app.store.get_occurrence(after.id) is not None


def test_an_unknown_parent_writes_nothing_and_the_transaction_goes_on(sync_driver: Driver) -> None:
    app = sync_driver.app
    caller = sync_driver.begin()
    caller.order(1)
    with pytest.raises(jobledger.SchedulerError) as missing:
        _flow_with_unknown_parent(app, caller.native)
    assert missing.value.code == "SCHEDULER_NOT_FOUND"
    caller.order(2)
    caller.commit()
    assert sync_driver.orders() == [1, 2]
    assert _count(app) == 0


def test_an_abandoned_flow_writes_nothing_and_leaves_the_transaction_alone(
    sync_driver: Driver,
) -> None:
    app = sync_driver.app
    caller = sync_driver.begin()
    caller.order(1)
    seen: list[str] = []
    with pytest.raises(RuntimeError):
        _abandoned_flow(app, caller.native, seen)
    caller.order(2)
    kept = caller.enqueue(payload={"n": 2})
    caller.commit()
    assert sync_driver.orders() == [1, 2]
    assert _count(app) == 1
    assert app.store.get_occurrence(kept.id) is not None
    assert app.store.get_occurrence(seen[0]) is None


def test_a_connection_on_another_store_is_refused_and_nothing_is_written(
    sync_driver: Driver, tmp_path: Path
) -> None:
    app = sync_driver.app
    if sync_driver.name == "sqlite3":
        other: Any = sqlite3.connect(tmp_path / "other.sqlite3", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
    elif sync_driver.name == "psycopg":
        import psycopg

        other = psycopg.connect(sync_driver.target.rsplit("/", 1)[0] + "/postgres")
    else:
        pytest.skip("the same check as psycopg's, on the connection the driver wraps")
    try:
        with pytest.raises(jobledger.SchedulerError) as refused:
            _small_graph(app, other)
        assert refused.value.details["reason"] == "another_store"
    finally:
        other.close()
    assert _count(app) == 0


def test_flow_async_writes_the_graph_in_the_callers_async_transaction(
    psycopg_driver: Driver,
) -> None:
    """``app.flow_async(conn=...)`` on a psycopg AsyncConnection: invisible until the caller
    commits; a synchronous connection is refused before the block."""
    import psycopg

    app = psycopg_driver.app

    async def main() -> list[jobledger.Occurrence]:
        async with await psycopg.AsyncConnection.connect(psycopg_driver.target) as conn:
            async with conn.transaction():
                await conn.execute("INSERT INTO orders (id) VALUES (1)")
                async with app.flow_async(conn=conn) as flow:
                    a = await flow.enqueue("confirm", payload={"n": 1})
                    await flow.enqueue("confirm", after=[a])
                assert _count(app) == 0  # not committed yet
        return flow.occurrences

    written = asyncio.run(main())
    assert [o.status for o in written] == ["queued", "blocked"]
    assert _count(app) == 2 and psycopg_driver.orders() == [1]

    sync_conn = psycopg.connect(psycopg_driver.target)

    async def refused() -> None:
        async with app.flow_async(conn=sync_conn):
            pass

    with pytest.raises(jobledger.SchedulerError) as error:
        asyncio.run(refused())
    assert error.value.details["reason"] == "sync_connection"
    sync_conn.close()
