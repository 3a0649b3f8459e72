"""``declare_schedule`` (the body of ``App.schedule``): idempotent declarations, CAS updates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jobledger import InvalidArgument, RevisionConflict
from jobledger.planning.declare import declare_schedule
from jobledger.schedules import Cron, Every, MisfirePolicy, Once, parse_schedule, schedule_json

from .helpers import AUTHORITY


def _declare(store, job_id="report", kind="report", **options):
    options.setdefault("authority", AUTHORITY)
    return declare_schedule(store, job_id, kind, **options)


def _updates(store, job_id="report"):
    return [e for e in store.history(job_id=job_id) if e.type == "job_updated"]


def test_declaring_twice_changes_nothing(store):
    first = _declare(store, cron="30 2 * * *", timezone="America/New_York", payload={"to": "ops"})
    again = _declare(store, cron="30  2 * * *", timezone="America/New_York", payload={"to": "ops"})
    assert again == first and again.revision == 1
    assert _updates(store) == []
    assert first.trigger == schedule_json(Cron("30 2 * * *", timezone="America/New_York"))
    assert first.kind == "report" and first.payload == {"to": "ops"} and first.enabled


def test_a_changed_declaration_updates_with_one_revision(store):
    _declare(store, every=timedelta(minutes=5))
    changed = _declare(
        store,
        every=timedelta(minutes=5),
        misfire="catch_up",
        catch_up_limit=20,
        jitter=timedelta(seconds=30),
    )
    assert changed.revision == 2
    assert parse_schedule(changed.trigger) == (
        Every(timedelta(minutes=5)),
        MisfirePolicy(misfire="catch_up", catch_up_limit=20, jitter=timedelta(seconds=30)),
    )
    [update] = _updates(store)
    assert update.data["changedFields"] == ["trigger"]
    third = _declare(
        store,
        every=timedelta(minutes=5),
        misfire="catch_up",
        catch_up_limit=20,
        jitter=timedelta(seconds=30),
        payload=[1],
        max_attempts=5,
        enabled=False,
    )
    assert third.revision == 3 and third.max_attempts == 5 and not third.enabled
    assert _updates(store)[0].data["changedFields"] == ["enabled", "maxAttempts", "payload"]
    # Same again: still revision 3.
    assert (
        _declare(
            store,
            every=timedelta(minutes=5),
            misfire="catch_up",
            catch_up_limit=20,
            jitter=timedelta(seconds=30),
            payload=[1],
            max_attempts=5,
            enabled=False,
        ).revision
        == 3
    )


def test_authority_and_kind_are_part_of_the_declaration(store):
    _declare(store, at=datetime(2030, 1, 1, tzinfo=UTC))
    other = {"principal": {"type": "service", "id": "billing"}}
    assert _declare(store, at=datetime(2030, 1, 1, tzinfo=UTC), authority=other).revision == 2
    assert (
        _declare(store, kind="other", at=datetime(2030, 1, 1, tzinfo=UTC), authority=other).revision
        == 3
    )


def test_at_keeps_whole_milliseconds_and_any_zone(store):
    berlin = datetime(2030, 6, 1, 9, 0, 0, 123_456, tzinfo=ZoneInfo("Europe/Berlin"))
    job = _declare(store, at=berlin)
    assert job.trigger["atMs"] == int(
        datetime(2030, 6, 1, 7, 0, 0, 123_000, tzinfo=UTC).timestamp() * 1000
    )
    # The same instant written in another zone is the same declaration.
    same = berlin.astimezone(timezone(timedelta(hours=-5)))
    assert _declare(store, at=same).revision == 1
    assert parse_schedule(job.trigger)[0] == Once(
        datetime(2030, 6, 1, 7, 0, 0, 123_000, tzinfo=UTC)
    )


def test_a_concurrent_update_is_reread_once(store, monkeypatch):
    _declare(store, every=timedelta(minutes=5))
    real_update = store.update_job
    calls = []

    def racing_update(job_id, *, expected_revision, patch, **options):
        calls.append(expected_revision)
        if len(calls) == 1:  # another process declares first (an operator's write would stand)
            real_update(
                job_id,
                expected_revision=expected_revision,
                patch={"payload": "theirs"},
                source="declaration",
            )
        return real_update(job_id, expected_revision=expected_revision, patch=patch, **options)

    monkeypatch.setattr(store, "update_job", racing_update)
    job = _declare(store, every=timedelta(minutes=10))
    assert calls == [1, 2] and job.revision == 3
    assert job.trigger == schedule_json(Every(timedelta(minutes=10)))
    assert job.payload is None  # the declaration wins, with a fresh compare-and-swap


def test_a_conflict_that_persists_is_raised(store, monkeypatch):
    _declare(store, every=timedelta(minutes=5))
    real_update = store.update_job

    def always_racing(job_id, *, expected_revision, patch, **options):
        real_update(
            job_id,
            expected_revision=expected_revision,
            patch={"payload": expected_revision},
            source="declaration",
        )
        return real_update(job_id, expected_revision=expected_revision, patch=patch, **options)

    monkeypatch.setattr(store, "update_job", always_racing)
    with pytest.raises(RevisionConflict):
        _declare(store, every=timedelta(minutes=10))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "cron"),
        ({"cron": "* * * * *", "every": timedelta(minutes=1)}, "every"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": 5}, "cron"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "* * * * *", "nonexistent": "later"}, "nonexistent"),
        ({"cron": "* * * * *", "ambiguous": "twice"}, "ambiguous"),
        ({"every": 60}, "every"),
        ({"every": timedelta(milliseconds=500)}, "every"),
        ({"every": timedelta(minutes=1), "anchor": datetime(2026, 1, 1)}, "anchor"),  # noqa: DTZ001
        ({"cron": "* * * * *", "anchor": datetime(2026, 1, 1, tzinfo=UTC)}, "anchor"),
        ({"every": timedelta(minutes=1), "timezone": "Europe/Berlin"}, "timezone"),
        ({"at": datetime(2026, 1, 1)}, "at"),  # noqa: DTZ001
        ({"at": "2026-01-01"}, "at"),
        ({"cron": "* * * * *", "misfire": "later"}, "misfire"),
        ({"cron": "* * * * *", "misfire_grace": timedelta(seconds=-1)}, "misfire_grace"),
        ({"cron": "* * * * *", "misfire_grace": 60}, "misfire_grace"),
        ({"cron": "* * * * *", "catch_up_limit": 0}, "catch_up_limit"),
        ({"cron": "* * * * *", "catch_up_limit": "5"}, "catch_up_limit"),
        ({"cron": "* * * * *", "jitter": timedelta(days=2)}, "jitter"),
        ({"cron": "* * * * *", "max_attempts": 0}, "max_attempts"),
        ({"cron": "* * * * *", "enabled": 1}, "enabled"),
        ({"cron": "* * * * *", "payload": {"x": float("nan")}}, "payload"),
        ({"cron": "* * * * *", "authority": {"principal": "me"}}, "authority"),
    ],
)
def test_bad_declarations_name_the_field_and_write_nothing(store, options, field):
    with pytest.raises(InvalidArgument) as info:
        _declare(store, **options)
    assert info.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert info.value.details["field"] == field, info.value
    assert store.get_job("report") is None


def test_bad_identifiers_name_the_field(store):
    with pytest.raises(InvalidArgument) as info:
        declare_schedule(store, " ", "report", cron="* * * * *", authority=AUTHORITY)
    assert info.value.details["field"] == "job_id"
    with pytest.raises(InvalidArgument) as info:
        declare_schedule(store, "j", "", cron="* * * * *", authority=AUTHORITY)
    assert info.value.details["field"] == "kind"


def test_a_manual_job_can_become_a_schedule(store):
    store.create_job(id="report", kind="report", authority=AUTHORITY)
    job = _declare(store, cron="0 * * * *")
    assert job.revision == 2 and store.schedule_state("report") is not None
