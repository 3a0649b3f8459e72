"""Enqueue in the caller's transaction (SPEC §8) against generated temp objects on the caller's
connection (issue 30, items 3 and 4), on both stores.

Each example opens a connection of the caller's own on a long-lived store, gives it temp
objects drawn from: tables named like one of jobledger's (the same columns and constraints, so
a write that reached one would succeed there silently; or one unrelated column), views named
like them, a temp trigger on the caller's own table, and — SQLite only, where they exist — a
temp trigger on one of jobledger's tables. Then a sequence of the caller's statements and
jobledger calls: ``enqueue`` with and without keys (keys taken before the transaction, taken
inside it, a payload that mismatches), ``enqueue_many``, ``flow(conn=...)``, and the caller's
own savepoints rolled back or released; the transaction ends in a commit or a rollback.

A model predicts each call: a new occurrence, the occurrence a key already names,
``SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH``, or — with a temp trigger on a jobledger table —
``SCHEDULER_INVALID_ARGUMENT`` (``temp_trigger``) writing nothing. After the end, the store
holds exactly what the model says committed, every occurrence with its one
``occurrence_enqueued`` event, the caller's own rows likewise, and ``verify()`` passes.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jobledger
from jobledger.testing import FakeClock
from tests.store.pg_support import fresh_database_url, postgres_template

from .support import budget, counted

__all__ = ["postgres_template"]  # a fixture used below

SHADOWED = [
    "events",
    "jobs",
    "occurrences",
    "jobledger_keys",
    "jobledger_dependencies",
    "jobledger_queues",
    "jobledger_store",
    "migrations",
]
SHAPES = ["same", "unrelated", "view"]


@dataclass
class Target:
    dialect: str
    app: jobledger.App
    location: str
    schema: str
    next_order: int = 0

    def connect(self) -> Any:
        if self.dialect == "sqlite":
            return self.app.connect()
        import psycopg

        return psycopg.connect(self.location, autocommit=False)

    def orders(self, ids: list[int]) -> list[int]:
        if not ids:
            return []
        admin = self.connect()
        try:
            listed = ", ".join(str(n) for n in ids)
            rows = admin.execute(f"SELECT id FROM orders WHERE id IN ({listed}) ORDER BY id")
            return [int(row[0]) for row in rows.fetchall()]
        finally:
            if self.dialect == "postgres":
                admin.rollback()
            admin.close()

    def temp_object(self, conn: Any, kind: str, name: str) -> None:
        if kind == "view":
            conn.execute(f'CREATE TEMP VIEW "{name}" AS SELECT 1 AS shadow')
        elif kind == "unrelated":
            conn.execute(f'CREATE TEMP TABLE "{name}" (shadow INTEGER)')
        elif self.dialect == "postgres":
            conn.execute(
                f'CREATE TEMP TABLE "{name}" (LIKE "{self.schema}"."{name}" INCLUDING ALL)'
            )
        else:  # the same DDL as jobledger's table: its columns, keys and constraints
            [ddl] = conn.execute(
                "SELECT sql FROM main.sqlite_master WHERE type = 'table' AND name = ?", (name,)
            ).fetchone()
            conn.execute("CREATE TEMP TABLE" + ddl[len("CREATE TABLE") :])

    def own_trigger(self, conn: Any) -> None:
        if self.dialect == "sqlite":
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS my_audit (order_id INTEGER)")
            conn.execute(
                "CREATE TEMP TRIGGER my_orders AFTER INSERT ON main.orders BEGIN "
                "INSERT INTO my_audit VALUES (new.id); END"
            )
        else:  # PostgreSQL has no temp triggers: a trigger on a temp table of the caller's
            conn.execute("CREATE TEMP TABLE my_audit (order_id INTEGER)")
            conn.execute(
                "CREATE FUNCTION pg_temp.my_audit_row() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RETURN NEW; END $$"
            )
            conn.execute(
                "CREATE TRIGGER my_audit_insert BEFORE INSERT ON pg_temp.my_audit "
                "FOR EACH ROW EXECUTE FUNCTION pg_temp.my_audit_row()"
            )


@dataclass
class Model:
    """What the open transaction has written, and what the store held before it."""

    stored: dict[str, tuple[str, int]]  # key -> (occurrence id, payload n), committed before
    pending: dict[str, tuple[str, int]] = field(default_factory=dict)
    made: list[str] = field(default_factory=list)  # ids written in this transaction
    orders: list[int] = field(default_factory=list)
    savepoints: list[tuple[dict[str, tuple[str, int]], list[str], list[int]]] = field(
        default_factory=list
    )

    def key(self, key: str) -> tuple[str, int] | None:
        return self.pending.get(key) or self.stored.get(key)


def _step_strategy() -> st.SearchStrategy[tuple[Any, ...]]:
    return st.one_of(
        st.tuples(st.just("order")),
        st.tuples(st.just("enqueue"), st.none() | st.integers(0, 3), st.booleans()),
        st.tuples(st.just("many"), st.integers(1, 3)),
        st.tuples(st.just("flow")),
        st.tuples(st.just("savepoint")),
        st.tuples(st.just("rollback_to")),
        st.tuples(st.just("release")),
    )


PLAN = st.fixed_dictionaries(
    {
        "temps": st.lists(
            st.tuples(st.sampled_from(SHAPES), st.sampled_from(SHADOWED)),
            max_size=4,
            unique_by=lambda item: item[1],
        ),
        "own_trigger": st.booleans(),
        "jobledger_trigger": st.none() | st.sampled_from(["occurrences", "events", "jobs"]),
        "taken": st.lists(st.integers(0, 3), max_size=2, unique=True),
        "steps": st.lists(_step_strategy(), min_size=1, max_size=8),
        "commit": st.booleans(),
    }
)


def _expect_refused(refused: bool, call: Any) -> Any:
    """Run ``call``; with a temp trigger on a jobledger table it must be refused, naming it."""
    if not refused:
        return call()
    counted("transactions.refused")
    with pytest.raises(jobledger.InvalidArgument) as caught:
        call()
    assert caught.value.details["reason"] == "temp_trigger"
    return None


def _run(target: Target, plan: dict[str, Any]) -> None:
    app = target.app
    prefix = uuid.uuid4().hex[:12]
    keys = [f"{prefix}-{index}" for index in range(4)]
    stored: dict[str, tuple[str, int]] = {}
    for index in plan["taken"]:
        stored[keys[index]] = (app.enqueue("confirm", payload={"n": 0}, key=keys[index]).id, 0)
    model = Model(stored)
    refused = target.dialect == "sqlite" and plan["jobledger_trigger"] is not None
    conn = target.connect()
    try:
        if target.dialect == "sqlite":
            conn.execute("BEGIN IMMEDIATE")
        for kind, name in plan["temps"]:
            target.temp_object(conn, kind, name)
            counted("transactions.temp_objects")
        if plan["own_trigger"]:
            target.own_trigger(conn)
        if refused:
            conn.execute(
                f"CREATE TEMP TRIGGER rewrite AFTER INSERT ON main.{plan['jobledger_trigger']} "
                "BEGIN SELECT 1; END"
            )
        _steps(target, conn, model, plan["steps"], keys, refused)
        conn.execute("COMMIT" if plan["commit"] else "ROLLBACK")
    finally:
        if target.dialect == "postgres" and not conn.closed:
            conn.rollback()
        conn.close()
    _check(target, model, committed=plan["commit"])


def _steps(
    target: Target,
    conn: Any,
    model: Model,
    steps: list[tuple[Any, ...]],
    keys: list[str],
    refused: bool,
) -> None:
    app = target.app
    for step in steps:
        counted("transactions.steps")
        if step[0] == "order":
            target.next_order += 1
            conn.execute(f"INSERT INTO orders (id) VALUES ({target.next_order})")
            model.orders.append(target.next_order)
        elif step[0] == "enqueue":
            _, index, mismatch = step
            n = 1 if mismatch else 0
            if index is None:
                made = _expect_refused(
                    refused, lambda n=n: app.enqueue("confirm", conn=conn, payload={"n": n})
                )
                if made is not None:
                    assert not made.deduplicated
                    model.made.append(made.id)
                continue
            key = keys[index]
            known = model.key(key)
            if refused:
                _expect_refused(
                    refused, lambda: app.enqueue("confirm", conn=conn, payload={"n": n}, key=key)
                )
            elif known is not None and known[1] != n:
                with pytest.raises(jobledger.SchedulerError) as mismatched:
                    app.enqueue("confirm", conn=conn, payload={"n": n}, key=key)
                assert mismatched.value.code == "SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH"
            else:
                made = app.enqueue("confirm", conn=conn, payload={"n": n}, key=key)
                if known is not None:
                    assert made.deduplicated and made.id == known[0]
                else:
                    assert not made.deduplicated
                    model.pending[key] = (made.id, n)
                    model.made.append(made.id)
        elif step[0] == "many":
            payloads = [{"n": 10 + i} for i in range(step[1])]
            batch = _expect_refused(
                refused, lambda p=payloads: app.enqueue_many("confirm", p, conn=conn)
            )
            if batch is not None:
                model.made.extend(made.id for made in batch)
        elif step[0] == "flow":
            ids = _expect_refused(refused, lambda: _small_flow(app, conn))
            if ids is not None:
                model.made.extend(ids)
        elif step[0] == "savepoint":
            name = f"mine_{len(model.savepoints)}"
            conn.execute(f"SAVEPOINT {name}")
            model.savepoints.append((dict(model.pending), list(model.made), list(model.orders)))
        elif model.savepoints:  # rollback_to / release of the innermost savepoint
            name = f"mine_{len(model.savepoints) - 1}"
            if step[0] == "rollback_to":
                conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                pending, made, orders = model.savepoints[-1]
                model.pending, model.made, model.orders = dict(pending), list(made), list(orders)
            conn.execute(f"RELEASE SAVEPOINT {name}")
            model.savepoints.pop()


def _small_flow(app: jobledger.App, conn: Any) -> list[str]:
    with app.flow(conn=conn) as flow:
        parent = flow.enqueue("confirm", payload={"n": 20})
        child = flow.enqueue("confirm", payload={"n": 21}, after=[parent])
    return [parent.id, child.id]


def _events(app: jobledger.App, occurrence_id: str) -> list[str]:
    return [event.type for event in app.store.history(occurrence_id=occurrence_id)]


def _check(target: Target, model: Model, *, committed: bool) -> None:
    app = target.app
    for occurrence_id in model.made:
        stored = app.store.get_occurrence(occurrence_id)
        if committed:
            assert stored is not None, occurrence_id
            assert _events(app, occurrence_id) == ["occurrence_enqueued"]
        else:
            assert stored is None, occurrence_id
            assert _events(app, occurrence_id) == []
    for key, (occurrence_id, n) in model.pending.items():
        again = app.enqueue("confirm", payload={"n": n}, key=key)
        assert again.deduplicated == committed  # a rolled-back key was never used
        assert again.id == occurrence_id or not committed
    assert target.orders(model.orders) == (sorted(model.orders) if committed else [])
    assert app.store.verify().ok


@pytest.fixture(scope="module")
def sqlite_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    path = tmp_path_factory.mktemp("txfuzz") / "db" / "app.sqlite3"
    app = jobledger.App(path, clock=FakeClock(), authorize=jobledger.allow_all, shared_file=True)
    app.create_job("confirm", "send_confirmation")
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    raw.commit()
    raw.close()
    yield Target("sqlite", app, str(path), "main")
    app.close()


@pytest.fixture(scope="module")
def postgres_target(postgres_template: str) -> Iterator[Target]:
    import psycopg

    for url in fresh_database_url(postgres_template):
        app = jobledger.App(url, clock=FakeClock(), authorize=jobledger.allow_all)
        app.create_job("confirm", "send_confirmation")
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
        yield Target("postgres", app, url, str(getattr(app.store, "schema")))
        app.close()


@budget(short=40, long=2_000)
@given(plan=PLAN)
def test_sqlite_enqueue_in_transaction_beside_temp_objects(
    sqlite_target: Target, plan: dict[str, Any]
) -> None:
    _run(sqlite_target, plan)


@pytest.mark.postgres
@budget(short=25, long=1_000)
@given(plan=PLAN)
def test_postgres_enqueue_in_transaction_beside_temp_objects(
    postgres_target: Target, plan: dict[str, Any]
) -> None:
    _run(postgres_target, plan)
