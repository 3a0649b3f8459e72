"""SQL injection through every identifier, JSON path, kind, workspace, schema name and payload.

Every value reaches SQL as a bound parameter: hostile strings that the identifier rules accept
round-trip exactly and match only themselves; the ones they refuse are refused, coded, with
nothing written; hostile PostgreSQL schema names are refused before any SQL is built; and the
schema is intact afterwards (every table still there, ``verify()`` ok).
"""

from __future__ import annotations

from typing import Any

import pytest

import jobledger
from jobledger.store.postgres.connection import validate_schema_name

HOSTILE = [
    "x'; DROP TABLE jobs; --",
    'x"; DROP TABLE occurrences; --',
    "x' OR '1'='1",
    "x') OR ('a'='a",
    "x%' --",
    "$.principal.id",
    "$[0]",
    "x\\'; SELECT pg_sleep(5); --",
    "x;DELETE FROM events",
    "x/**/OR/**/1=1",
    "%s",
    "%(owner_id)s",
    ":now",
    "?",
    "x\u2028y",
    "é's",
]


def _try(call: Any) -> tuple[bool, Any]:
    try:
        return True, call()
    except jobledger.SchedulerError as exc:
        error = exc
    assert error.code.startswith("SCHEDULER_")
    return False, error


def _authority(workspace: str | None = None, principal: str = "alice") -> dict[str, Any]:
    authority: dict[str, Any] = {"principal": {"type": "user", "id": principal}}
    if workspace is not None:
        authority["workspaceId"] = workspace
    return authority


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_identifiers_round_trip_or_are_refused(store, hostile):
    store.create_job(id="plain", kind="work", authority=_authority())
    accepted = {}
    for field, call in {
        "job_id": lambda: store.create_job(id=hostile, kind="work", authority=_authority()),
        "kind": lambda: store.create_job(id="k-job", kind=hostile, authority=_authority()),
        "principal": lambda: store.create_job(
            id="p-job", kind="work", authority=_authority(principal=hostile)
        ),
        "workspace": lambda: store.create_job(
            id="w-job", kind="work", authority=_authority(workspace=hostile)
        ),
    }.items():
        ok, value = _try(call)
        accepted[field] = ok
        if ok:
            assert isinstance(value, jobledger.Job)
    if accepted["job_id"]:
        job = store.get_job(hostile)
        assert job is not None and job.id == hostile.strip()
    if accepted["kind"]:
        assert store.get_job("k-job").kind == hostile.strip()
    if accepted["principal"]:
        assert store.get_job("p-job").authority["principal"]["id"] == hostile
    # Occurrences with hostile trigger keys, owners, reasons and actors.
    occurrence = store.enqueue_occurrence(job_id="plain", scheduled_for=0, trigger_key="t1")
    ok, hostile_occurrence = _try(
        lambda: store.enqueue_occurrence(job_id="plain", scheduled_for=0, trigger_key=hostile)
    )
    if ok:
        assert store.get_occurrence(hostile_occurrence.id).trigger_key == hostile.strip()
    ok, claimed = _try(lambda: store.claim_next(owner_id=hostile, lease_ms=60_000))
    if ok and claimed is not None:
        assert claimed.lease_owner == hostile.strip()
        ok, _ = _try(
            lambda: store.release_lease(
                occurrence_id=claimed.id, owner_id=hostile, fence=claimed.fence, reason=hostile
            )
        )
    _try(
        lambda: store.cancel_occurrence(occurrence_id=occurrence.id, actor=hostile, reason=hostile)
    )
    # Reads with hostile filters match nothing (and certainly not everything).
    for read in (
        lambda: store.get_job(hostile + "-missing"),
        lambda: store.get_occurrence(hostile),
        lambda: store.list_occurrences(job_id=hostile + "-missing"),
        lambda: store.list_occurrences(kind=hostile + "-missing"),
        lambda: store.history(job_id=hostile + "-missing"),
        lambda: store.events(event_type=hostile),
        lambda: store.list_dead_letters(job_id=hostile + "-missing"),
        lambda: store.list_occurrences_by_trigger(job_id="plain", trigger_key=hostile + "-x"),
    ):
        ok, value = _try(read)
        if ok:
            assert value in (None, []) or tuple(getattr(value, "items", ())) == ()
    ok, none = _try(lambda: store.claim_next(owner_id="w", lease_ms=1000, workspace_id=hostile))
    if ok and none is not None:
        assert none.authority.get("workspaceId") == hostile
    # Everything is still there and sound.
    assert store.get_job("plain") is not None
    assert store.verify().ok


@pytest.mark.parametrize(
    "payload",
    [
        {"sql": "'); DROP TABLE jobs; --", "path": "$.a[0]", "q": '"\\"'},
        {"$.authority": {"principal": {"type": "admin", "id": "root"}}},
        ["x' OR 1=1", {"nested": {"deeper": "'; --"}}],
        {"unicode": "é\u2028\u2029\U0001f984", "keys": {"10": 1, "2": 2}},
        "a plain 'string' with \"quotes\"",
    ],
)
def test_hostile_payloads_round_trip_exactly(store, payload):
    job = store.create_job(id="j", kind="work", authority=_authority(), payload=payload)
    assert store.get_job("j").payload == payload == job.payload
    occurrence = store.enqueue_occurrence(
        job_id="j", scheduled_for=0, trigger_key="t", payload=payload
    )
    assert store.get_occurrence(occurrence.id).payload == payload
    claimed = store.claim_next(owner_id="w", lease_ms=60_000)
    assert claimed is not None
    assert claimed.authority["principal"] == _authority()["principal"]  # not the payload's
    settled = store.settle(
        occurrence_id=claimed.id,
        owner_id="w",
        fence=claimed.fence,
        outcome="succeeded",
        result=payload,
    )
    assert store.get_occurrence(settled.id).result == payload
    assert store.verify().ok


HOSTILE_SCHEMAS = [
    'jobledger"; DROP SCHEMA public CASCADE; --',
    "jobledger; DROP TABLE x",
    "Jobledger",
    "job ledger",
    "public",
    "pg_catalog",
    "pg_temp",
    "information_schema",
    "select",
    "a" * 49,
    "",
    "1abc",
    "jobledger\x00",
    "jöbledger",
]


@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS)
def test_hostile_schema_names_are_refused_before_any_sql(schema):
    with pytest.raises(jobledger.InvalidArgument):
        validate_schema_name(schema)


@pytest.mark.postgres
@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS[:4])
def test_hostile_schema_names_are_refused_by_open_store(postgres_database_url, schema):
    import psycopg

    with pytest.raises(jobledger.InvalidArgument):
        jobledger.open_store(postgres_database_url, schema=schema, listen=False)
    with psycopg.connect(postgres_database_url) as conn:
        schemas = {row[0] for row in conn.execute("SELECT nspname FROM pg_namespace")}
    assert "public" in schemas and not any("DROP" in name for name in schemas)
