"""Every public Store operation, on both stores, with generated arguments: 0 uncoded exceptions,
and a failed call changes nothing.

Each example runs a short sequence of operations against one long-lived store (so later calls
meet the jobs, occurrences and leases earlier ones made). Arguments are drawn per parameter from
a mix of plausible values (ids that exist, owners that hold leases, small fences, valid
authorities and schedule JSON) and anything at all (wrong types, hostile strings, NaN, huge
integers, nested JSON). Every call must return or raise a coded ``SchedulerError``; after a
failed write the snapshot of every table must be unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jobledger
from jobledger.models import SchedulePlan, SlotFiring
from jobledger.schedules import Every, MisfirePolicy, schedule_json
from tests.store.pg_support import fresh_database_url

from .support import anything, budget, call_coded, json_values, snapshot, text

READS = {
    "get_job",
    "list_jobs",
    "get_occurrence",
    "list_occurrences",
    "count_occurrences",
    "list_occurrences_by_trigger",
    "history",
    "events",
    "list_dead_letters",
    "lease_holders",
    "oldest_due",
    "throughput",
    "list_workers",
    "audit_log",
    "due_schedules",
    "schedule_state",
    "owner_gone",
    "verify",
    "schema_info",
    "now",
}
WRITES = {
    "create_job",
    "update_job",
    "remove_job",
    "enqueue_occurrence",
    "enqueue_occurrence_once_per_trigger",
    "enqueue_batch",
    "claim_next",
    "claim_batch",
    "claim_occurrence",
    "renew",
    "renew_batch",
    "settle",
    "settle_batch",
    "release_lease",
    "requeue_dead_letter",
    "cancel_occurrence",
    "expire_leases_of",
    "register_worker",
    "touch_worker",
    "stop_worker",
    "prune",
    "record_plans",
}
AUTHORITY = {"principal": {"type": "user", "id": "fuzz"}}
STATUSES = ["queued", "running", "retry_wait", "succeeded", "dead_letter", "cancelled"]
SCHEDULE = schedule_json(Every(timedelta(seconds=5)), MisfirePolicy())


class Pools:
    def __init__(self) -> None:
        self.jobs = ["job-a", "job-b", "sched"]
        self.occurrences: list[str] = []
        self.owners = ["w1", "w2"]

    def remember(self, result: Any) -> None:
        items = result if isinstance(result, list) else [result]
        for item in items:
            if isinstance(item, jobledger.Occurrence) and item.id not in self.occurrences:
                self.occurrences.append(item.id)
            elif isinstance(item, jobledger.Job) and item.id not in self.jobs:
                self.jobs.append(item.id)


def plausible(name: str, pools: Pools) -> st.SearchStrategy[Any]:
    # Draw an index, not a member: what is drawn must not depend on the store's state, or
    # Hypothesis cannot replay an example (the pools grow as the run goes).
    def member(pool: list[str]) -> st.SearchStrategy[str]:
        return st.integers(min_value=0, max_value=10**6).map(
            lambda index: pool[index % len(pool)] if pool else f"missing-{index}"
        )

    ids = member(pools.jobs)
    occurrences = member(pools.occurrences)
    owners = member(pools.owners)
    small = st.integers(min_value=0, max_value=6)
    instant = st.integers(min_value=1_700_000_000_000 - 10**7, max_value=1_700_000_000_000 + 10**7)
    table: dict[str, st.SearchStrategy[Any]] = {
        "id": ids,
        "job_id": ids,
        "occurrence_id": occurrences,
        "owner_id": owners,
        "worker_id": owners,
        "actor": owners,
        "kind": st.just("work"),
        "job_kind": st.just("work"),
        "kinds": st.lists(st.sampled_from(["work", "other"]), min_size=1, max_size=2),
        "workspace_id": st.sampled_from(["ws-1", None]),
        "fence": small,
        "expected_fence": small,
        "expected_revision": small,
        "lease_ms": st.integers(min_value=1, max_value=120_000),
        "limit": st.integers(min_value=1, max_value=20),
        "scheduled_for": instant,
        "available_at": st.one_of(st.none(), instant),
        "retry_at": st.one_of(st.none(), instant),
        "since": instant,
        "before": instant,
        "now": st.one_of(st.none(), instant),
        "trigger_key": st.sampled_from(["t1", "t2", "manual:1"]),
        "authority": st.just(AUTHORITY),
        "trigger": st.sampled_from([None, {}, SCHEDULE, {"cron": "* * * * *"}]),
        "payload": json_values,
        "result": json_values,
        "error": st.one_of(st.none(), st.just({"code": "boom", "message": "it broke"})),
        "outcome": st.sampled_from(["succeeded", "failed"]),
        "reason": st.sampled_from(["fuzz", "worker_shutdown", "owner_gone"]),
        "status": st.sampled_from([None, *STATUSES]),
        "statuses": st.lists(st.sampled_from(STATUSES), min_size=1, max_size=3),
        "patch": st.dictionaries(
            st.sampled_from(["kind", "payload", "enabled", "max_attempts", "trigger"]),
            st.one_of(st.booleans(), small, json_values, st.just("work")),
            min_size=1,
            max_size=3,
        ),
        "event_type": st.sampled_from([None, "occurrence_claimed", "job_created"]),
        "hostname": st.just("host"),
        "pid": st.integers(min_value=1, max_value=10**6),
        "info": st.just({"kinds": ["work"]}),
        "max_attempts": st.integers(min_value=1, max_value=5),
        "enabled": st.booleans(),
        "retryable": st.booleans(),
        "batch_size": st.integers(min_value=1, max_value=50),
        "requests": st.lists(
            st.builds(
                jobledger.EnqueueRequest,
                job_id=ids,
                scheduled_for=instant,
                trigger_key=text(),
                payload=st.one_of(st.just(jobledger.UNSET), json_values),
                once_per_trigger=st.booleans(),
            ),
            max_size=4,
        ),
        "renewals": st.lists(
            st.builds(
                jobledger.Renewal,
                occurrence_id=occurrences,
                owner_id=owners,
                fence=small,
                lease_ms=st.integers(min_value=1, max_value=60_000),
            ),
            max_size=3,
        ),
        "settlements": st.lists(
            st.builds(
                jobledger.Settlement,
                occurrence_id=occurrences,
                owner_id=owners,
                fence=small,
                outcome=st.sampled_from(["succeeded", "failed"]),
                result=json_values,
            ),
            max_size=3,
        ),
        "plans": st.lists(
            st.builds(
                SchedulePlan,
                job_id=ids,
                expected_revision=small,
                expected_planned_through=instant,
                expected_last_slot=st.one_of(st.none(), instant),
                planned_through=instant,
                last_slot=st.one_of(st.none(), instant),
                next_due_at=st.one_of(st.none(), instant),
                fire=st.lists(
                    st.builds(
                        SlotFiring,
                        scheduled_for=instant,
                        trigger_key=st.sampled_from(["every:1", "every:2"]),
                        available_at=instant,
                    ),
                    max_size=2,
                ).map(tuple),
            ),
            max_size=2,
        ),
    }
    return table.get(name, anything())


def _arguments(data: st.DataObject, method: Any, pools: Pools) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for name, parameter in inspect.signature(method).parameters.items():
        if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        optional = parameter.default is not inspect.Parameter.empty
        choice = data.draw(st.sampled_from(["plausible", "plausible", "anything", "omit"]))
        if choice == "omit" and optional:
            continue
        strategy = plausible(name, pools) if choice != "anything" else anything()
        arguments[name] = data.draw(strategy, label=name)
    return arguments


def _seed(store: jobledger.Store, pools: Pools) -> None:
    store.create_job(id="job-a", kind="work", authority=AUTHORITY, max_attempts=3)
    store.create_job(id="job-b", kind="work", authority=AUTHORITY, max_attempts=1)
    store.create_job(id="sched", kind="work", authority=AUTHORITY, trigger=SCHEDULE)
    for index in range(6):
        pools.remember(
            store.enqueue_occurrence(
                job_id="job-a" if index % 2 else "job-b",
                scheduled_for=1_700_000_000_000 + index,
                trigger_key=f"seed-{index}",
            )
        )
    store.claim_next(owner_id="w1", lease_ms=60_000)
    store.claim_next(owner_id="w2", lease_ms=1)


def _fuzz_store(target: str, store: jobledger.Store, pools: Pools, data: st.DataObject) -> None:
    names = sorted(READS | WRITES)
    for _ in range(data.draw(st.integers(min_value=1, max_value=6))):
        name = data.draw(st.sampled_from(names), label="operation")
        method = getattr(store, name)
        arguments = _arguments(data, method, pools)
        before = snapshot(target) if name in WRITES else None
        ok, outcome = call_coded(f"store.{name}", lambda: method(**arguments))  # noqa: B023
        if ok:
            pools.remember(outcome)
        elif before is not None:
            assert snapshot(target) == before, f"{name}({arguments}) failed but changed the store"


@pytest.fixture(scope="module")
def sqlite_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Pools]]:
    target = str(tmp_path_factory.mktemp("fuzz") / "db" / "fuzz.sqlite3")
    pools = Pools()
    with jobledger.open_store(target, synchronous="NORMAL") as store:
        _seed(store, pools)
        yield target, store, pools


@pytest.fixture(scope="module")
def postgres_target(postgres_template: str) -> Iterator[tuple[str, Any, Pools]]:
    for url in fresh_database_url(postgres_template):
        pools = Pools()
        with jobledger.open_store(url, listen=False) as store:
            _seed(store, pools)
            yield url, store, pools


@budget(short=250, long=5_000)
@given(data=st.data())
def test_sqlite_store_operations(sqlite_target, data):
    _fuzz_store(*sqlite_target, data)


@pytest.mark.postgres
@budget(short=100, long=2_000)
@given(data=st.data())
def test_postgres_store_operations(postgres_target, data):
    _fuzz_store(*postgres_target, data)


def test_open_store_arguments(tmp_path: Path) -> None:
    """``open_store`` itself: hostile targets and options are refused, coded."""

    @budget(short=150, long=3_000)
    @given(target=anything(), options=st.dictionaries(text(), anything(), max_size=2))
    def run(target: Any, options: dict[str, Any]) -> None:
        if isinstance(target, str):
            # Never a path outside the test's directory, never a server but a closed local port.
            # surrogatepass: generated text may hold lone surrogates, which quote() cannot encode.
            quoted = quote(target.encode("utf-8", "surrogatepass"), safe="")
            if target.startswith("postgres"):
                target = f"postgresql://fuzz:{quoted}@127.0.0.1:1/x"
            elif target != ":memory:":
                target = str(tmp_path / "targets" / quoted[:50])
        ok, store = call_coded("open_store", lambda: jobledger.open_store(target, **options))
        if ok:
            store.close()

    run()
