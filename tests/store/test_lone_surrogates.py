"""Lone surrogates in JSON (SPEC §2 "Text"): payloads and results holding them round-trip
through both stores byte for byte, stored as the reference stores them (JSON.stringify's
``\\udxxx`` escape); identifiers holding them (bound to SQL as raw text) are refused, changing
nothing."""

from __future__ import annotations

from typing import Any

import pytest

from jobledger.contract import canonical_json

from .helpers import claim, enqueue, make_job, raises_code

# chr(): linters cannot tell some surrogate literals apart.
HIGH, LOW = chr(0xD800), chr(0xDFFF)
PAYLOAD = {"lone": HIGH, "in": "a" + LOW + "b", chr(0xDC00): [chr(0xDBFF) + chr(0xD800)]}
RESULT = ["x" + chr(0xDE00) + chr(0xD83D), {"pair": chr(0xD83D) + chr(0xDE00)}]


def _stored(store: Any, backend: str, occurrence_id: str) -> tuple[str, str]:
    sql = "SELECT payload_json, result_json FROM {}occurrences WHERE occurrence_id = {}"
    if backend == "sqlite":
        cursor = store._connection.raw.cursor()
        cursor.row_factory = None
        row = cursor.execute(sql.format("", "?"), (occurrence_id,)).fetchone()
    else:
        with store._pool._pool.connection() as conn:
            found = conn.execute(
                sql.format(f'"{store.schema}".', "%s"), (occurrence_id,)
            ).fetchone()
            row = tuple(found.values()) if isinstance(found, dict) else found
    return row[0], row[1]


def test_a_payload_and_a_result_with_lone_surrogates_round_trip(
    store, store_factory, backend, clock, authority
):
    make_job(store, authority, "job-a", payload=PAYLOAD)
    job = store.get_job("job-a")
    assert job is not None and job.payload == PAYLOAD
    occurrence = enqueue(store, "job-a", clock(), "t", payload=PAYLOAD)
    assert occurrence.payload == PAYLOAD
    claimed = claim(store)
    store.settle(
        occurrence_id=claimed.id,
        owner_id="w1",
        fence=claimed.fence,
        outcome="succeeded",
        result=RESULT,
    )
    payload_json, result_json = _stored(store, backend, occurrence.id)
    # byte for byte what the reference writes: the escapes, never raw surrogates
    assert payload_json == canonical_json(PAYLOAD) and "\\ud800" in payload_json
    assert result_json == canonical_json(RESULT) and "\\ude00\\ud83d" in result_json
    # the pair is one character; each lone one keeps its code unit
    assert canonical_json(RESULT).count("\\u") == 2
    again = store_factory().get_occurrence(occurrence.id)
    assert again is not None
    assert (again.payload, again.result) == (PAYLOAD, [RESULT[0], {"pair": "\U0001f600"}])


@pytest.mark.parametrize("bad", [HIGH, "a" + LOW, b"x\xff".decode("utf-8", "surrogateescape")])
def test_an_identifier_with_a_lone_surrogate_is_refused_unchanged(store, clock, authority, bad):
    make_job(store, authority, "job-a")
    with raises_code("SCHEDULER_INVALID_ARGUMENT") as refused:
        make_job(store, authority, "job-" + bad)
    assert "not valid Unicode text: it holds a lone surrogate" in refused.value.message
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        enqueue(store, "job-a", clock(), "t" + bad)
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.get_occurrence("occ_" + bad)
    assert [job.id for job in store.list_jobs()] == ["job-a"]
    assert store.list_occurrences(limit=10).items == ()
