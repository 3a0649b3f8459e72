"""Flows under SIGKILL (SPEC §10), on SQLite and PostgreSQL: worker processes are killed at
random instants while parents settle, and every join still runs exactly once.

Flows are enqueued up front: fan-outs from a root to many leaves, joined by one ``join`` that
a ``link`` chains after; some flows hold a ``doomed`` leaf (a dead letter), whose join and link
are cancelled under ``"cancel"``, or whose join runs anyway under ``"run"``. Three workers
(:mod:`tests.slow.acceptance.flow_kill_worker`) drain them while one of them is SIGKILLed and
replaced every 100–250 ms — often inside the settle transaction that counts a join down.
Afterwards: nothing is live (so nothing stays blocked once every parent is terminal); each
join was unblocked once and succeeded once, after all its parents were terminal (the
side-effect file records what each run read); the cancelled ones are exactly the doomed flows'
descendants; the store verifies.

The short run is part of the default suite; the long one is ``long`` (``JOBLEDGER_LONG=1``).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import jobledger
from jobledger import EnqueueRequest

WORKER = Path(__file__).with_name("flow_kill_worker.py")
AUTHORITY = {"principal": {"type": "user", "id": "acceptance"}}
LIVE = ("blocked", "queued", "running", "retry_wait")


@dataclass(frozen=True)
class Size:
    good: int  # fan-in flows that succeed
    doomed: int  # flows with a failing leaf, join under "cancel"
    run: int  # flows with a failing leaf, join under "run"
    leaves: int
    kills: int
    workers: int = 3


SHORT = Size(good=6, doomed=2, run=2, leaves=40, kills=10)
LONG = Size(good=30, doomed=6, run=6, leaves=200, kills=60, workers=4)


@pytest.fixture
def target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return str(tmp_path / "store" / "flows.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


@dataclass
class Flow:
    policy: str  # "ok", "cancel" (doomed) or "run" (doomed, join runs)
    leaves: list[str]
    join: str
    link: str


def _enqueue(store: jobledger.Store, size: Size) -> list[Flow]:
    for job_id, attempts in (("leaf", 32), ("doomed", 1), ("join", 32), ("link", 32)):
        store.create_job(id=job_id, kind=job_id, authority=AUTHORITY, max_attempts=attempts)
    flows: list[Flow] = []
    kinds = ["ok"] * size.good + ["cancel"] * size.doomed + ["run"] * size.run
    now = store.now()
    for index, policy in enumerate(kinds):
        [root] = store.enqueue_batch([EnqueueRequest("leaf", now, f"f{index}-root")])
        requests = [
            EnqueueRequest(
                "doomed" if policy != "ok" and leaf == size.leaves // 2 else "leaf",
                now,
                f"f{index}-leaf{leaf}",
                after=(root.id,),
            )
            for leaf in range(size.leaves)
        ]
        leaves = store.enqueue_batch(requests)
        join_policy = "run" if policy == "run" else "cancel"
        [join] = store.enqueue_batch(
            [
                EnqueueRequest(
                    "join",
                    now,
                    f"f{index}-join",
                    after=tuple(leaf.id for leaf in leaves),
                    on_parent_failure=join_policy,  # type: ignore[arg-type]
                )
            ]
        )
        [link] = store.enqueue_batch(
            [EnqueueRequest("link", now, f"f{index}-link", after=(join.id,))]
        )
        assert join.status == "blocked" and link.status == "blocked"
        flows.append(Flow(policy, [root.id, *[leaf.id for leaf in leaves]], join.id, link.id))
    return flows


def _start(target: str, owner: str, stop: Path, effects: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), target, owner, str(stop), str(effects)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _live(store: jobledger.Store) -> int:
    return sum(row.count for row in store.count_occurrences() if row.status in LIVE)


def _pick_holder(
    store: jobledger.Store,
    running: dict[str, subprocess.Popen[bytes]],
    stop: Path,
    rng: random.Random,
) -> str:
    """A worker that holds a lease right now, so the kill strands work a survivor must take
    over; one that is still opening its store or is between claims would prove nothing. Falls
    back to any working process when none holds a lease for a while (the flows are blocked on a
    lease that is running out)."""
    deadline = time.monotonic() + 2.0
    while True:
        ready = sorted(o for o in running if Path(f"{stop}.{o}.ready").exists())
        holders = {h.owner_id for h in store.lease_holders()}
        holding = [o for o in ready if o in holders]
        if holding:
            return rng.choice(holding)
        if ready and time.monotonic() > deadline:
            return rng.choice(ready)
        time.sleep(0.002)


def _run(target: str, size: Size, tmp_path: Path, seed: int) -> dict[str, object]:
    options = {"listen": False} if target.startswith("postgresql://") else {}
    with jobledger.open_store(target, **options) as store:  # type: ignore[arg-type]
        flows = _enqueue(store, size)
        stop, effects = tmp_path / "stop", tmp_path / "effects.jsonl"
        rng = random.Random(seed)
        running: dict[str, subprocess.Popen[bytes]] = {}
        finished: list[subprocess.Popen[bytes]] = []
        killed = 0
        serial = 0
        try:
            for _ in range(size.workers):
                serial += 1
                running[f"w{serial}"] = _start(target, f"w{serial}", stop, effects)
            time.sleep(0.7)  # let them open the store and get going
            for _ in range(size.kills):
                time.sleep(rng.uniform(0.1, 0.25))
                if _live(store) == 0:
                    break  # drained before every kill landed: the ones that did are checked
                victim = _pick_holder(store, running, stop, rng)
                process = running.pop(victim)
                process.send_signal(signal.SIGKILL)
                process.wait(10)
                killed += 1
                serial += 1
                running[f"w{serial}"] = _start(target, f"w{serial}", stop, effects)
            deadline = time.monotonic() + (600 if size is LONG else 180)
            while _live(store) > 0:
                assert time.monotonic() < deadline, "the survivors did not finish the flows"
                for process in running.values():
                    assert process.poll() is None, process.communicate()[0].decode()
                time.sleep(0.1)
        finally:
            stop.write_text("stop")
            for process in running.values():
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                finished.append(process)
        for process in finished:
            assert process.returncode == 0, process.communicate()[0].decode()
        return _check(store, flows, effects, killed)


def _check(
    store: jobledger.Store, flows: list[Flow], effects: Path, killed: int
) -> dict[str, object]:
    assert _live(store) == 0  # nothing blocked, queued or running is left
    runs: dict[str, list[dict[str, object]]] = {}
    for line in effects.read_text().splitlines():
        record = json.loads(line)
        runs.setdefault(record["id"], []).append(record)
    reruns = 0
    for flow in flows:
        join = store.get_occurrence(flow.join)
        link = store.get_occurrence(flow.link)
        assert join is not None and link is not None
        join_events = Counter(e.type for e in store.history(occurrence_id=flow.join, limit=200))
        if flow.policy == "cancel":
            assert join.status == "cancelled" and link.status == "cancelled"
            assert join.last_error["code"] == "parent_failed"
            assert link.last_error["code"] == "parent_failed"
            assert flow.join not in runs
            assert join_events["occurrence_unblocked"] == 0
            continue
        assert join.status == "succeeded", (flow.policy, join.status)
        assert link.status == "succeeded"
        assert join_events["occurrence_unblocked"] == 1
        assert join_events["occurrence_succeeded"] == 1
        parents = store.parent_states(flow.join)
        expected = sorted(p.status for p in parents)
        assert len(parents) == len(flow.leaves) - 1
        if flow.policy == "ok":
            assert expected == ["succeeded"] * len(parents)
        else:
            assert Counter(expected) == Counter({"succeeded": len(parents) - 1, "dead_letter": 1})
        # every run of the join (a kill after its side effect reruns it, with a higher fence)
        # saw all its parents terminal, as they are now
        seen = runs[flow.join]
        assert all(run["parents"] == expected for run in seen)
        fences = [run["fence"] for run in seen]
        assert fences == sorted(set(fences))
        reruns += len(seen) - 1
    assert store.verify().ok
    # kills landed while workers held leases: those occurrences were taken over
    reclaims = len(store.events(event_type="occurrence_reclaimed", limit=1000))
    assert reclaims >= 1
    return {"killed": killed, "joins": len(runs), "join_reruns": reruns, "reclaims": reclaims}


def test_killed_workers_leave_every_join_run_once(target, tmp_path):
    report = _run(target, SHORT, tmp_path, seed=20261202)
    print(json.dumps(report))
    assert report["killed"] == SHORT.kills


@pytest.mark.acceptance
@pytest.mark.long
@pytest.mark.xdist_group("acceptance")
@pytest.mark.timeout(900)
def test_killed_workers_leave_every_join_run_once_long(target, tmp_path):
    report = _run(target, LONG, tmp_path, seed=20261203)
    print(json.dumps(report))
    assert report["killed"] == LONG.kills
