"""``Store.resolve_occurrence_id``: a unique start of an occurrence id is the id (as git takes a
unique start of a commit hash); too short, ambiguous or unknown starts are coded errors."""

from __future__ import annotations

import pytest

import jobledger
from jobledger.errors import InvalidArgument
from jobledger.store.operations.occurrences import ambiguous_prefix

from .helpers import make_job, raises_code

SLOT = 1_767_225_600_000
# Two firings of job "j" (revision 1, SLOT) whose ids share nine hex digits (found by search):
# occ_b858a7b159… and occ_b858a7b156….
TWINS = ("k-180661", "k-32484")
SHARED = "b858a7b15"


def _twins(store: jobledger.Store, authority: dict) -> tuple[str, str]:
    make_job(store, authority, "j")
    first, second = (
        store.enqueue_occurrence(job_id="j", scheduled_for=SLOT, trigger_key=key).id
        for key in TWINS
    )
    assert first.startswith("occ_" + SHARED + "9") and second.startswith("occ_" + SHARED + "6")
    return first, second


def test_a_unique_start_is_the_id(store, authority):
    first, second = _twins(store, authority)
    other = store.enqueue_occurrence(job_id="j", scheduled_for=SLOT, trigger_key="other").id
    for given in (
        other,  # a whole id is its own prefix
        other[:12],  # occ_ and 8 hex digits
        other[4:12],  # the hex digits alone
        "  " + other[:20].upper() + "\n",  # case and surrounding spaces do not matter
    ):
        assert store.resolve_occurrence_id(given) == other
    assert store.resolve_occurrence_id(SHARED + "9") == first
    assert store.resolve_occurrence_id("occ_" + SHARED + "6") == second
    assert store.resolve_occurrence_id(second) == second


@pytest.mark.parametrize("given", [SHARED[:8], "occ_" + SHARED])
def test_an_ambiguous_start_names_the_candidates(store, authority, given):
    first, second = _twins(store, authority)
    with raises_code("SCHEDULER_AMBIGUOUS_ID") as info:
        store.resolve_occurrence_id(given)
    error = info.value
    assert isinstance(error, InvalidArgument)  # bad input: the CLI exits 2, the web says 400
    assert error.details == {
        "prefix": "occ_" + given.removeprefix("occ_"),
        "candidates": [
            second,
            first,
        ],
    }
    # Each candidate is shown just long enough to be told apart (and at least occ_ + 12).
    assert f"{second[:16]}…" in error.message and f"{first[:16]}…" in error.message


def test_an_unknown_start_is_not_found(store, authority):
    _twins(store, authority)
    with raises_code("SCHEDULER_NOT_FOUND") as info:
        store.resolve_occurrence_id("0123abcd")
    assert "No scheduler occurrence id starts with occ_0123abcd" in info.value.message
    whole = "occ_" + "0" * 64
    with raises_code("SCHEDULER_NOT_FOUND") as info:
        store.resolve_occurrence_id(whole)
    assert info.value.message == f"Scheduler occurrence does not exist: {whole}"


@pytest.mark.parametrize(
    "given",
    [
        "b858a7b",  # 7 hex digits: too short to be worth a lookup
        "occ_b858a7b",
        "occ_",
        "",
        "   ",
        "occ_b858a7bz",  # not hex
        "occ_" + "0" * 65,  # longer than an id
        "job_b858a7b15",
        "occ-b858a7b15",
        "b858a7b15²",
        None,
        12345678,
    ],
)
def test_a_start_that_cannot_be_an_id_is_refused(store, authority, given):
    _twins(store, authority)
    with raises_code("SCHEDULER_INVALID_ARGUMENT") as info:
        store.resolve_occurrence_id(given)
    assert info.value.details == {"field": "occurrenceId"}
    assert "at least 8 hex digits" in info.value.message


def test_a_closed_store_refuses(store_factory):
    closed = store_factory()
    closed.close()
    with raises_code("SCHEDULER_STORE_CLOSED"):
        closed.resolve_occurrence_id("occ_b858a7b15")


def test_the_lookup_is_a_range_scan_of_the_id_index(store, authority, backend):
    """One read along the primary key, not a scan of every occurrence."""
    make_job(store, authority, "j")
    store.enqueue_batch(
        [
            jobledger.EnqueueRequest(job_id="j", scheduled_for=SLOT, trigger_key=f"n-{n}")
            for n in range(500)
        ]
    )
    params = {"low": "occ_b858a7b1", "high": "occ_b858a7b2", "limit": 6}
    if backend == "sqlite":
        from jobledger.store.sqlite.store import QUERIES

        with store._connection.reading() as conn:
            rows = conn.execute(
                "EXPLAIN QUERY PLAN " + QUERIES["occurrence_ids_by_prefix"], params
            ).fetchall()
        plan = " | ".join(str(row["detail"]) for row in rows)
        assert "SEARCH occurrences USING COVERING INDEX" in plan, plan
        assert "occurrence_id>? AND occurrence_id<?" in plan, plan
    else:
        from jobledger.store.postgres.store import QUERIES

        def body(conn, _now):
            conn.execute("ANALYZE occurrences")
            found = conn.execute("EXPLAIN " + QUERIES["occurrence_ids_by_prefix"], params)
            return " | ".join(str(next(iter(row.values()))) for row in found.fetchall()), False

        plan = store._pool.transaction(body)
        assert "Index Only Scan using occurrences_pkey" in plan, plan
        assert "Seq Scan" not in plan, plan


@pytest.mark.postgres
def test_the_range_is_the_prefix_in_a_linguistic_collation_too(postgres_database_url):
    """A database created with a non-C collation orders ids by that collation; the range
    [prefix, prefix with its last digit + 1) still holds exactly the ids with that prefix."""
    import psycopg

    from jobledger.store.operations.occurrences import _NEXT_HEX

    ids = [
        jobledger.derive_occurrence_identity(
            job_id="j", job_revision=1, scheduled_for=SLOT, trigger_key=f"c-{n}"
        )[0]
        for n in range(400)
    ]
    prefixes = sorted({key[: 4 + length] for key in ids[:40] for length in (1, 2, 8)})
    prefixes += [f"occ_{digit}" for digit in "0123456789abcdef"]
    pairs = [(key, low, low[:-1] + _NEXT_HEX[low[-1]]) for key in ids for low in prefixes]
    with psycopg.connect(postgres_database_url) as conn:
        wrong = conn.execute(
            """
            SELECT count(*) FROM unnest(%(ids)s::text[], %(lows)s::text[], %(highs)s::text[])
                AS t(id, low, high)
            WHERE (id COLLATE "en-US-x-icu" >= low AND id COLLATE "en-US-x-icu" < high)
                <> starts_with(id, low)
            """,
            {
                "ids": [pair[0] for pair in pairs],
                "lows": [pair[1] for pair in pairs],
                "highs": [pair[2] for pair in pairs],
            },
        ).fetchone()
    assert wrong == (0,)


def test_more_candidates_than_shown_say_so():
    ids = [f"occ_aaaaaaaa{n:056x}" for n in range(6)]
    error = ambiguous_prefix("occ_aaaaaaaa", ids)
    assert error.code == "SCHEDULER_AMBIGUOUS_ID"
    assert error.details == {"prefix": "occ_aaaaaaaa", "candidates": ids[:5]}
    assert error.message.startswith("occ_aaaaaaaa is the start of more than 5 occurrence ids (")
    # They share 67 characters: each is shown up to the one that differs.
    assert f"{ids[0]}…" in error.message and "give more of it" in error.message
