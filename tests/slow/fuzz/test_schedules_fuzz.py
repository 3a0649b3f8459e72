"""Schedules and the planner with generated input: trigger constructors and parsing, schedule
JSON given to the store, schedule JSON damaged in the database under the planner, and
``Planner.tick``. 0 uncoded exceptions; a job whose stored schedule cannot be evaluated is
reported (``PlanReport.unreadable``), never a crash of the tick."""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jobledger
from jobledger.planning.planner import Planner
from jobledger.schedules import Cron, Every, MisfirePolicy, Once, parse_trigger, schedule_json
from jobledger.testing import FakeClock

from .support import anything, budget, call_coded, json_values, text

AUTHORITY = {"principal": {"type": "user", "id": "fuzz"}}
VALID = [
    schedule_json(Cron("*/5 * * * *", timezone="Europe/Paris"), MisfirePolicy()),
    schedule_json(Every(timedelta(seconds=5)), MisfirePolicy(misfire="catch_up")),
    schedule_json(Once(datetime(2030, 1, 1, tzinfo=UTC)), MisfirePolicy(misfire="skip")),
]
CRON_ALPHABET = "0123456789*/,-? LW#JANFEBMONSUNjan \t"


def mutated_schedule() -> st.SearchStrategy[Any]:
    """A valid schedule JSON with a few fields replaced, removed or added."""

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        value = copy.deepcopy(draw(st.sampled_from(VALID)))
        for _ in range(draw(st.integers(min_value=0, max_value=3))):
            key = draw(st.sampled_from([*value.keys(), "extra"]))
            action = draw(st.sampled_from(["replace", "delete", "replace"]))
            if action == "delete":
                value.pop(key, None)
            else:
                value[key] = draw(
                    st.one_of(
                        json_values,
                        st.integers(min_value=-(2**63), max_value=2**63),
                        st.sampled_from(["cron", "every", "once", "skip", "UTC", "0 0 31 2 *"]),
                    )
                )
        limit = value.get("catchUpLimit")
        if type(limit) is int and 500 < limit <= 10_000:
            # A valid catch-up of thousands of slots is correct but slow (≈1 s per 10,000
            # enqueued); the fuzz is after refusals and crashes, not throughput.
            value["catchUpLimit"] = 500
        return value

    return build()


@budget(short=600, long=20_000)
@given(
    expression=st.one_of(st.text(alphabet=CRON_ALPHABET, max_size=30), text()),
    timezone=st.one_of(st.sampled_from(["UTC", "America/New_York", "Nowhere/Else"]), text()),
    after=st.integers(min_value=-(2**40), max_value=2**45),
)
def test_cron_expressions(expression, timezone, after):
    ok, cron = call_coded("Cron()", lambda: Cron(expression, timezone=timezone))
    if ok:
        call_coded("Cron.next_after", lambda: cron.next_after(after))
        call_coded("Cron.describe", cron.describe)


@budget(short=300, long=8_000)
@given(interval=anything(), anchor=anything(), at=anything())
def test_every_and_once(interval, anchor, at):
    call_coded("Every()", lambda: Every(interval, anchor=anchor))
    call_coded("Once()", lambda: Once(at))


@budget(short=600, long=15_000)
@given(value=st.one_of(mutated_schedule(), json_values))
def test_parse_trigger(value):
    ok, trigger = call_coded("parse_trigger", lambda: parse_trigger(value))
    if ok and trigger is not None:
        call_coded("trigger.next_after", lambda: trigger.next_after(1_700_000_000_000))


@pytest.fixture(scope="module")
def planner_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Any]]:
    target = str(tmp_path_factory.mktemp("fuzz-planner") / "db" / "planner.sqlite3")
    clock = FakeClock(1_700_000_000_000)
    with jobledger.open_store(target, clock=clock, synchronous="NORMAL") as store:
        yield target, store, clock


@budget(short=300, long=10_000)
@given(
    trigger=st.one_of(mutated_schedule(), json_values),
    later=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
)
def test_schedule_json_given_to_the_store_then_planned(trigger, later):
    clock = FakeClock(1_700_000_000_000)
    with jobledger.open_store(":memory:", clock=clock) as store:
        store.create_job(id="other", kind="work", authority=AUTHORITY, trigger=VALID[1])
        ok, _ = call_coded(
            "store.create_job(trigger)",
            lambda: store.create_job(
                id="fuzzed", kind="work", authority=AUTHORITY, trigger=trigger
            ),
        )
        if not ok:
            assert [job.id for job in store.list_jobs()] == ["other"]
        clock.advance(later)
        call_coded("Planner.tick", lambda: Planner(store).tick())


class _Raw(str):
    """JSON punctuation on :func:`_dumps`' stack (a plain ``str`` there is a value)."""


def _dumps(value: object) -> str:
    """``json.dumps``, also for values nested deeper than it can recurse (``deeply_nested()``
    inside a schedule): the same text, built with an explicit stack."""
    try:
        return json.dumps(value)
    except RecursionError:
        return _dumps_with_a_stack(value)


def _dumps_with_a_stack(value: object) -> str:
    out: list[str] = []
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item)
        elif isinstance(item, list):
            out.append("[")
            stack.append(_Raw("]"))
            for index in range(len(item) - 1, -1, -1):
                stack.append(item[index])
                if index:
                    stack.append(_Raw(", "))
        elif isinstance(item, dict):
            out.append("{")
            stack.append(_Raw("}"))
            pairs = list(item.items())
            for index in range(len(pairs) - 1, -1, -1):
                key, inner = pairs[index]
                stack.append(inner)
                stack.append(_Raw(json.dumps(key) + ": "))
                if index:
                    stack.append(_Raw(", "))
        else:
            out.append(json.dumps(item))
    return "".join(out)


def test_the_deep_json_writer_matches_json_dumps():
    value = {"a": [1, {"b": None, "c": "x"}, []], "d": {}, "e": [[2.5, True]]}
    assert _dumps(_deep(value)) == '{"k": [' * 3_000 + json.dumps(value) + "]}" * 3_000
    shallow = _deep(value, 2)
    assert _dumps_with_a_stack(shallow) == json.dumps(shallow)


def _deep(value: object, depth: int = 3_000) -> object:
    for _ in range(depth):
        value = {"k": [value]}
    return value


@budget(short=150, long=5_000)
@given(stored=st.one_of(mutated_schedule(), json_values), raw=st.booleans(), junk=text())
def test_schedule_json_damaged_in_the_database(planner_store, stored, raw, junk):
    """A stored schedule the planner cannot evaluate (written by a newer version, or damaged)
    is skipped and reported, and the tick goes on with the other jobs."""
    target, store, clock = planner_store
    job_id = "damaged"
    if store.get_job(job_id) is None:
        store.create_job(id=job_id, kind="work", authority=AUTHORITY, trigger=VALID[1])
    # Text the database can hold: a lone surrogate cannot be UTF-8, so it arrives as U+FFFD.
    text_value = junk.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    text_value = text_value if raw else _dumps(stored)
    conn = sqlite3.connect(target)
    try:
        with conn:
            conn.execute("UPDATE jobs SET trigger_json = ? WHERE job_id = ?", (text_value, job_id))
            conn.execute(
                "UPDATE jobledger_schedules SET next_due_at = 0 WHERE job_id = ?", (job_id,)
            )
    except sqlite3.IntegrityError:
        return  # the schema's own CHECK refused it (not valid JSON): nothing to plan
    finally:
        conn.close()
    clock.advance(timedelta(seconds=13))
    call_coded("Planner.tick (damaged row)", lambda: Planner(store).tick())
    call_coded("store.schedule_state (damaged row)", lambda: store.schedule_state(job_id))
