"""Jobs: create, read, compare-and-swap update, and their audit events (§3.4)."""

from __future__ import annotations

import pytest

from jobledger import normalize_authority

from .helpers import make_job, raises_code, types

INVALID = "SCHEDULER_INVALID_ARGUMENT"


def test_create_job_defaults_and_event(store, clock, authority):
    job = store.create_job(id="job-a", kind="email", authority=authority)
    assert job.id == "job-a"
    assert job.kind == "email"
    assert job.trigger == {}
    assert job.payload is None
    assert job.authority == normalize_authority(authority)
    assert job.enabled is True
    assert job.revision == 1
    assert job.max_attempts == 3
    assert job.created_at == job.updated_at == clock()
    assert store.get_job("job-a") == job
    [event] = store.history(job_id="job-a")
    assert event.type == "job_created"
    assert event.job_id == "job-a"
    assert event.occurrence_id is None
    assert event.owner_id is None
    assert event.fence is None
    assert event.occurred_at == clock()
    assert event.data == {"revision": 1}


def test_create_job_stores_given_values_and_trims_identifiers(store, authority):
    job = store.create_job(
        id="  job-b  ",
        kind=" report ",
        authority=authority,
        trigger={"type": "manual"},
        payload={"n": [1, 2]},
        enabled=False,
        max_attempts=32,
    )
    assert (job.id, job.kind) == ("job-b", "report")
    assert job.trigger == {"type": "manual"}
    assert job.payload == {"n": [1, 2]}
    assert job.enabled is False
    assert job.max_attempts == 32
    assert store.get_job(" job-b ") == job


def test_get_job_missing_is_none(store):
    assert store.get_job("nope") is None


def test_create_job_existing_id_conflicts(store, authority):
    make_job(store, authority, "job-a")
    with raises_code("SCHEDULER_CONFLICT"):
        make_job(store, authority, "job-a", kind="other")
    assert store.get_job("job-a").kind == "email"
    assert types(store.history(job_id="job-a")) == ["job_created"]


BAD_CREATE = [
    ("id", ""),
    ("id", "   "),
    ("id", "a\tb"),
    ("id", "a\x7fb"),
    ("id", "x" * 257),
    ("id", 7),
    ("id", None),
    ("kind", ""),
    ("kind", "k" * 129),
    ("kind", None),
    ("authority", None),
    ("authority", {}),
    ("authority", {"principal": {"type": "user", "id": "t"}, "allowExecution": True}),
    ("authority", "user:tester"),
    ("trigger", float("nan")),
    ("trigger", {"a": object()}),
    ("payload", {1: "non-string key"}),
    ("payload", float("inf")),
    ("enabled", "yes"),
    ("enabled", 1),
    ("max_attempts", 0),
    ("max_attempts", 33),
    ("max_attempts", None),
    ("max_attempts", True),
    ("max_attempts", 1.5),
    ("max_attempts", "3"),
]


@pytest.mark.parametrize(("field", "value"), BAD_CREATE)
def test_create_job_rejects_invalid_arguments(store, authority, field, value):
    arguments = {"id": "job-a", "kind": "email", "authority": authority, field: value}
    with raises_code(INVALID):
        store.create_job(**arguments)
    assert store.history() == []


def test_create_job_boundaries_accepted(store, authority):
    long_id = "x" * 256
    job = store.create_job(id=long_id, kind="k" * 128, authority=authority, max_attempts=1)
    assert job.id == long_id
    assert job.max_attempts == 1


def test_update_job_bumps_revision_and_records_changed_fields(store, clock, authority):
    make_job(store, authority, "job-a")
    clock.advance(5)
    job = store.update_job(
        "job-a",
        expected_revision=1,
        patch={"max_attempts": 5, "payload": {"x": 1}, "enabled": False, "kind": "sms"},
    )
    assert job.revision == 2
    assert job.max_attempts == 5
    assert job.payload == {"x": 1}
    assert job.enabled is False
    assert job.kind == "sms"
    assert job.updated_at == clock()
    assert job.created_at == clock() - 5
    assert store.get_job("job-a") == job
    [updated, created] = store.history(job_id="job-a")
    assert (updated.type, created.type) == ("job_updated", "job_created")
    assert updated.owner_id is None
    assert updated.fence is None
    assert updated.occurrence_id is None
    assert updated.data == {
        "fromRevision": 1,
        "toRevision": 2,
        "changedFields": ["enabled", "kind", "maxAttempts", "payload"],
    }


def test_update_job_always_bumps_revision_even_without_change(store, authority):
    make_job(store, authority, "job-a", payload=None)
    job = store.update_job("job-a", expected_revision=1, patch={"payload": None})
    assert job.revision == 2
    assert job.payload is None
    job = store.update_job("job-a", expected_revision=2, patch={"trigger": None})
    assert job.revision == 3
    assert job.trigger is None


def test_update_job_authority_and_trigger(store, authority):
    make_job(store, authority, "job-a")
    other = {"principal": {"type": "agent", "id": "bot"}, "workspaceId": "ws-1"}
    job = store.update_job(
        "job-a", expected_revision=1, patch={"authority": other, "trigger": {"every": 5}}
    )
    assert job.authority == normalize_authority(other)
    assert job.trigger == {"every": 5}
    assert store.history(job_id="job-a")[0].data["changedFields"] == ["authority", "trigger"]


def test_update_job_missing_is_not_found(store):
    with raises_code("SCHEDULER_NOT_FOUND"):
        store.update_job("ghost", expected_revision=1, patch={"enabled": False})


def test_update_job_revision_conflict_details(store, authority):
    make_job(store, authority, "job-a")
    store.update_job("job-a", expected_revision=1, patch={"enabled": False})
    with raises_code("SCHEDULER_REVISION_CONFLICT") as info:
        store.update_job("job-a", expected_revision=1, patch={"enabled": True})
    assert info.value.details == {"expectedRevision": 1, "actualRevision": 2}
    job = store.get_job("job-a")
    assert job.enabled is False
    assert job.revision == 2
    with raises_code("SCHEDULER_REVISION_CONFLICT") as info:
        store.update_job("job-a", expected_revision=3, patch={"enabled": True})
    assert info.value.details == {"expectedRevision": 3, "actualRevision": 2}
    assert types(store.history(job_id="job-a")) == ["job_updated", "job_created"]


def test_update_job_revision_conflict_across_two_handles(store, store_factory, authority):
    make_job(store, authority, "job-a")
    second = store_factory()
    assert second.update_job("job-a", expected_revision=1, patch={"kind": "sms"}).revision == 2
    with raises_code("SCHEDULER_REVISION_CONFLICT") as info:
        store.update_job("job-a", expected_revision=1, patch={"kind": "fax"})
    assert info.value.details == {"expectedRevision": 1, "actualRevision": 2}
    assert store.get_job("job-a").kind == "sms"
    assert store.update_job("job-a", expected_revision=2, patch={"kind": "fax"}).revision == 3
    assert second.get_job("job-a").kind == "fax"


BAD_UPDATE = [
    ({"job_id": ""}),
    ({"job_id": "a\nb"}),
    ({"expected_revision": 0}),
    ({"expected_revision": -1}),
    ({"expected_revision": True}),
    ({"expected_revision": "1"}),
    ({"expected_revision": 1.5}),
    ({"patch": {}}),
    ({"patch": None}),
    ({"patch": [("enabled", False)]}),
    ({"patch": {"maxAttempts": 2}}),
    ({"patch": {"revision": 9}}),
    ({"patch": {"enabled": "no"}}),
    ({"patch": {"max_attempts": 0}}),
    ({"patch": {"max_attempts": 33}}),
    ({"patch": {"kind": ""}}),
    ({"patch": {"authority": {"principal": {"type": "user"}}}}),
    ({"patch": {"payload": float("nan")}}),
]


@pytest.mark.parametrize("override", BAD_UPDATE)
def test_update_job_rejects_invalid_arguments(store, authority, override):
    make_job(store, authority, "job-a")
    arguments = {"job_id": "job-a", "expected_revision": 1, "patch": {"enabled": False}}
    arguments.update(override)
    job_id = arguments.pop("job_id")
    with raises_code(INVALID):
        store.update_job(job_id, **arguments)
    assert store.get_job("job-a").revision == 1
    assert types(store.history()) == ["job_created"]


def test_update_job_unknown_fields_are_named(store, authority):
    make_job(store, authority, "job-a")
    with raises_code(INVALID) as info:
        store.update_job("job-a", expected_revision=1, patch={"maxAttempts": 2, "zz": 1})
    assert info.value.details == {"fields": ["maxAttempts", "zz"]}


def test_update_job_validates_before_looking_up_the_job(store):
    with raises_code(INVALID):
        store.update_job("ghost", expected_revision=0, patch={"enabled": False})
    with raises_code(INVALID):
        store.update_job("ghost", expected_revision=1, patch={})


def test_get_job_rejects_invalid_identifier(store):
    with raises_code(INVALID):
        store.get_job("")
    with raises_code(INVALID):
        store.get_job(None)
