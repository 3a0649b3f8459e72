"""Plain helpers for the schedule tests (no fixtures)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from jobledger import Occurrence, SQLiteStore, Store
from jobledger.schedules import Cron, Every, MisfirePolicy, Once, schedule_json
from jobledger.testing import FakeClock

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def ms(moment: datetime) -> int:
    """Epoch ms of an aware datetime."""
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def at(instant_ms: int) -> datetime:
    """The aware UTC datetime of epoch ms."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=instant_ms)


def move_to(clock: FakeClock, moment: datetime | int) -> int:
    """Advance a fake clock to ``moment`` (it only moves forward)."""
    target = moment if isinstance(moment, int) else ms(moment)
    assert target >= clock(), "a fake clock only moves forward"
    return clock.advance(target - clock())


def schedule_job(
    store: Store,
    job_id: str,
    trigger: Cron | Every | Once,
    policy: MisfirePolicy | None = None,
    **options: Any,
):
    options.setdefault("kind", "tick")
    return store.create_job(
        id=job_id, authority=AUTHORITY, trigger=schedule_json(trigger, policy), **options
    )


def occurrence_rows(store: Store, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows of a raw read-only query on the store's own database (``?`` placeholders): the tests
    check the occurrences table itself, not only what the API says."""
    if isinstance(store, SQLiteStore):
        with store._connection.reading() as conn:
            return [dict(row) for row in conn.execute(sql, params).fetchall()]
    pg_sql = sql.replace("?", "%s")

    def body(conn: Any, _now: int) -> tuple[list[dict[str, Any]], bool]:
        return [dict(row) for row in conn.execute(pg_sql, params).fetchall()], False

    return store._pool.transaction(body, read_only=True)  # type: ignore[attr-defined,no-any-return]


def all_occurrences(store: Store, job_id: str) -> list[Occurrence]:
    """Every occurrence of a job (read from the occurrences table), oldest slot first."""
    found = occurrence_rows(
        store, "SELECT occurrence_id FROM occurrences WHERE job_id = ?", (job_id,)
    )
    occurrences = [store.get_occurrence(row["occurrence_id"]) for row in found]
    return sorted(
        (occurrence for occurrence in occurrences if occurrence is not None),
        key=lambda o: (o.scheduled_for, o.job_revision),
    )


def slots_of(store: Store, job_id: str) -> list[int]:
    return [o.scheduled_for for o in all_occurrences(store, job_id)]


def assert_one_per_slot(store: Store, job_id: str) -> list[int]:
    """Every slot has exactly one occurrence; return the slots."""
    slots = slots_of(store, job_id)
    duplicated = {slot: n for slot, n in Counter(slots).items() if n > 1}
    assert not duplicated, f"{job_id}: slots with more than one occurrence: {duplicated}"
    return slots


def expected_slots(trigger: Cron | Every | Once, after_ms: int, until_ms: int) -> list[int]:
    """The trigger's slots in ``(after, until]``, from the public iterator (independent of the
    planner's bounded primitives)."""
    slots = []
    for moment in trigger.fire_times(at(after_ms)):
        slot = ms(moment)
        if slot > until_ms:
            break
        if slot > after_ms:
            slots.append(slot)
    return slots


def skip_events(store: Store, job_id: str) -> list[dict[str, Any]]:
    """The data of a job's ``schedule_slots_skipped`` events, oldest first (from the table)."""
    found = occurrence_rows(
        store,
        "SELECT data_json FROM events WHERE job_id = ? AND event_type = ? ORDER BY event_id",
        (job_id, "schedule_slots_skipped"),
    )
    return [json.loads(row["data_json"]) for row in found]


def raw_write(store: Store, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Run one raw statement on the store's database (to plant data the API refuses)."""
    if isinstance(store, SQLiteStore):
        store._connection.write(lambda conn: conn.execute(sql, params))
        return
    pg_sql = sql.replace("?", "%s")
    store._pool.transaction(lambda conn, _now: (conn.execute(pg_sql, params), False))  # type: ignore[attr-defined]
