"""Queue limits and pauses hold across real processes, on both stores (SPEC §7).

Several worker processes claim from one store in random batches with random handler times,
while an operator process pauses, resumes and re-declares the limited queue at random
(``concurrency`` 1..4, ``partition_concurrency`` 1..2; ``worker_concurrency`` 2 and ``rate`` 40
per second throughout). Every process appends to one log (``queue_limits_process.py``). The
checks, from that log and the store:

* nothing is lost: every occurrence succeeded, started once, at attempt 1 and fence 1 — work a
  limit or a pause held back never cost an attempt;
* at no point of the log do more occurrences of the limited queue run than its
  ``concurrency`` allows, nor of one partition than ``partition_concurrency``, nor of one
  worker than ``worker_concurrency`` — against the limits that could be in force (below);
* no claim commits while the queue is paused (a claim that began after a pause returned and
  returned before the resume began took nothing from the queue);
* no rate window (from the store's claim events) holds more claims than the rate.

Limits that could be in force: for the occurrences running at one point of the log, the last
of them to be claimed saw the others running when its claim committed, somewhere between the
earliest of their ``claiming`` lines and that point; the limit then was the one declared last
before that window, or one whose declaration was under way in it.

The short run (default) takes a few seconds per store; the long one is ``long``
(``JOBLEDGER_LONG=1``).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.testing import FakeClock
from tests.slow.acceptance import queue_limits_process as proc

SCRIPT = Path(proc.__file__)
AUTHORITY = {"principal": {"type": "user", "id": "acceptance"}}
PARTITIONS = ["p0", "p1", "p2", None]


@pytest.fixture
def target(backend, tmp_path, request) -> str:
    if backend == "sqlite":
        path = tmp_path / "db" / "jobledger.sqlite3"
        jobledger.open_store(str(path)).close()
        return str(path)
    return str(request.getfixturevalue("postgres_database_url"))


def _seed(target: str, limited: int, free: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    with jobledger.open_store(target) as store:
        store.declare_queue(proc.declaration(3, 1), actor="setup")
        store.create_job(id="limited", kind="work", authority=AUTHORITY, queue=proc.LIMITED)
        store.create_job(id="free", kind="work", authority=AUTHORITY, queue="free")
        now = store.now()
        ids = [
            store.enqueue_occurrence(
                job_id="limited",
                scheduled_for=now,
                trigger_key=f"l{index}",
                partition=rng.choice(PARTITIONS),
                priority=rng.randint(-2, 2),
            ).id
            for index in range(limited)
        ]
        ids += [
            store.enqueue_occurrence(job_id="free", scheduled_for=now, trigger_key=f"f{index}").id
            for index in range(free)
        ]
    return ids


@dataclass
class Declarations:
    """Concurrency limits over the log: (intent position, done position, limits)."""

    spans: list[tuple[int, int, dict[str, int]]] = field(default_factory=list)

    def allowed(self, key: str, window_start: int, now: int) -> int:
        """The largest ``key`` limit that could be in force at some point of
        [window_start, now]: the last declared before the window, and any under way in it."""
        before = [span for span in self.spans if span[1] < window_start]
        candidates = [before[-1]] if before else []
        candidates += [span for span in self.spans if span[1] >= window_start and span[0] <= now]
        return max(span[2][key] for span in candidates)


def _read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_log(lines: list[dict[str, Any]]) -> dict[str, int]:
    queues = {line["id"]: line["q"] for line in lines if line["e"] == "start"}
    declarations = Declarations(spans=[(-1, -1, {"c": 3, "pc": 1})])
    intents: dict[str, int] = {}
    claiming: dict[tuple[str, int], int] = {}
    began: dict[str, int] = {}  # occurrence → position of its claim's `claiming` line
    running: dict[str, dict[str, Any]] = {}
    paused_since: int | None = None  # position of the pause-done line while paused
    resume_pending = False
    peaks: Counter[str] = Counter()
    for position, line in enumerate(lines):
        event = line["e"]
        if event.endswith("-intent"):
            intents[event] = position
            if event == "resume-intent":
                resume_pending = True
        elif event == "declare-done":
            span = (intents["declare-intent"], position, {"c": line["c"], "pc": line["pc"]})
            declarations.spans.append(span)
        elif event == "pause-done":
            if paused_since is None:
                paused_since = position
            resume_pending = False
        elif event == "resume-done":
            paused_since = None
            resume_pending = False
        elif event == "claiming":
            claiming[(line["p"], line["k"])] = position
        elif event == "claimed":
            start = claiming[(line["p"], line["k"])]
            for occurrence_id in line["ids"]:
                began[occurrence_id] = start
            if paused_since is not None and start > paused_since and not resume_pending:
                peaks["claims_while_paused"] += 1
                took = [i for i in line["ids"] if queues.get(i) == proc.LIMITED]
                assert not took, (
                    f"a claim that began at line {start}, after the pause returned at line "
                    f"{paused_since}, took {took} from the paused queue"
                )
        elif event == "start":
            assert line["attempt"] == 1 and line["fence"] == 1, line
            if line["q"] != proc.LIMITED:
                continue
            running[line["id"]] = {**line, "began": began[line["id"]]}
            _check_open(running, declarations, position, peaks)
        elif event == "stop":
            running.pop(line["id"], None)
    return dict(peaks)


def _check_open(
    running: dict[str, dict[str, Any]], declarations: Declarations, now: int, peaks: Counter[str]
) -> None:
    """The occurrences of the limited queue running at log position ``now``, grouped as each
    limit counts them, never exceed what could have been in force."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for item in running.values():
        groups[("c", "")].append(item)
        groups[("w", item["p"])].append(item)
        if item["part"] is not None:
            groups[("pc", item["part"])].append(item)
    for (key, label), items in groups.items():
        window = min(item["began"] for item in items)
        if key == "w":
            allowed = proc.WORKER_CONCURRENCY
        else:
            allowed = declarations.allowed(key, window, now)
        peaks[key] = max(peaks[key], len(items))
        assert len(items) <= allowed, (
            f"{len(items)} running in {key} {label!r} at log line {now}, limit {allowed}: "
            f"{sorted(item['id'] for item in items)}"
        )


def _run(target: str, tmp_path: Path, *, workers: int, limited: int, free: int, seed: int):
    expected = _seed(target, limited, free, seed)
    go, stop, log = tmp_path / "go", tmp_path / "stop", tmp_path / "log.jsonl"
    roles = [("operator", "operator")] + [("worker", f"worker-{n}") for n in range(workers)]
    reports = {name: tmp_path / f"{name}.json" for _, name in roles}
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                target,
                role,
                name,
                str(seed + index),
                str(go),
                str(stop),
                str(log),
                str(reports[name]),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for index, (role, name) in enumerate(roles)
    ]
    outputs: list[str] = []
    try:
        for path in reports.values():
            while not Path(f"{path}.ready").exists():
                failed = [p.returncode for p in processes if p.poll() not in (None, 0)]
                assert not failed, f"a process exited early: {failed}"
                time.sleep(0.01)
        go.write_text("go")
        with jobledger.open_store(target, clock=FakeClock()) as store:
            while True:  # until every occurrence settled (the processes' own pace)
                live = sum(
                    row.count
                    for row in store.count_occurrences()
                    if row.status in ("queued", "running", "retry_wait")
                )
                if live == 0 or any(p.poll() not in (None, 0) for p in processes):
                    break
                processes[0].poll()
                time.sleep(0.05)
        stop.write_text("stop")
        outputs = [p.communicate(timeout=120)[0].decode(errors="replace") for p in processes]
    finally:
        stop.write_text("stop")
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert [p.returncode for p in processes] == [0] * len(processes), outputs
    for name, path in reports.items():
        report = json.loads(path.read_text())
        assert report["errors"] == [], (name, report["errors"])
    lines = _read_log(log)
    peaks = _check_log(lines)

    with jobledger.open_store(target) as store:
        final = [store.get_occurrence(occurrence_id) for occurrence_id in expected]
        claims = [
            event
            for occurrence in final
            if occurrence is not None and occurrence.queue == proc.LIMITED
            for event in store.events(occurrence_id=occurrence.id, limit=50)
            if event.type in ("occurrence_claimed", "occurrence_reclaimed")
        ]
        audit = [record.action for record in store.audit_log(limit=200)]
    assert all(o is not None and o.status == "succeeded" for o in final), "work was lost"
    assert all(o.attempt == 1 for o in final if o is not None), "held-back work cost attempts"
    starts = Counter(line["id"] for line in lines if line["e"] == "start")
    assert sorted(starts) == sorted(expected) and set(starts.values()) == {1}
    per_window = Counter(event.occurred_at // proc.RATE.per_ms for event in claims)
    assert max(per_window.values()) <= proc.RATE.limit, per_window
    assert "queue_paused" in audit or "queue_updated" in audit
    return peaks, len(lines)


def test_queue_limits_hold_across_processes(target, tmp_path):
    peaks, lines = _run(target, tmp_path, workers=3, limited=120, free=40, seed=7)
    # The limits were reached, not just respected by an idle run.
    assert peaks["c"] >= 2 and peaks["w"] == proc.WORKER_CONCURRENCY, peaks
    assert peaks["claims_while_paused"] > 0, peaks  # the pause check had claims to check
    assert lines > 500


@pytest.mark.acceptance
@pytest.mark.long
@pytest.mark.parametrize("seed", [11, 23, 42])
def test_queue_limits_hold_across_processes_long(target, tmp_path, seed):
    # Under the whole suite's load this PostgreSQL run once saw 2 running in a partition
    # limited to 1. A settle read the partition limit without its queue's lock and could admit
    # by a limit a concurrent re-declaration had just tightened (fixed; pinned by
    # tests/store/postgres/test_concurrency.py's re-declaration test).
    peaks, _ = _run(target, tmp_path, workers=6, limited=600, free=200, seed=seed)
    assert peaks["c"] >= 3, peaks


def _line(event: str, name: str = "worker-0", **data: Any) -> dict[str, Any]:
    return {"e": event, "p": name, **data}


def _started(name: str, step: int, occurrence_id: str, part: str | None = None) -> list[dict]:
    return [
        _line("claiming", name, k=step),
        _line("claimed", name, k=step, ids=[occurrence_id]),
        _line("start", name, id=occurrence_id, q=proc.LIMITED, part=part, fence=1, attempt=1),
    ]


def test_the_log_checker_finds_each_kind_of_violation():
    # Four running at once under a concurrency of 3 (the seed's declaration).
    lines = [
        line for n in range(4) for line in _started(f"worker-{n}", 1, f"occ_{n}", part=f"p{n}")
    ]
    with pytest.raises(AssertionError, match="running in c"):
        _check_log(lines)
    # Two of one partition (partition_concurrency 1).
    lines = _started("worker-0", 1, "occ_a", "p0") + _started("worker-1", 1, "occ_b", "p0")
    with pytest.raises(AssertionError, match="running in pc 'p0'"):
        _check_log(lines)
    # Three of one worker (worker_concurrency 2).
    lines = [line for n in range(3) for line in _started("worker-0", n, f"occ_{n}", f"p{n}")]
    with pytest.raises(AssertionError, match="running in w 'worker-0'"):
        _check_log(lines)
    # A claim that began after the pause returned took from the paused queue.
    lines = [_line("pause-intent", "operator"), _line("pause-done", "operator")]
    with pytest.raises(AssertionError, match="from the paused queue"):
        _check_log(lines + _started("worker-0", 1, "occ_x"))
    # A raised limit, declared before the claims began, allows more.
    raised = [
        _line("declare-intent", "operator", c=4, pc=2),
        _line("declare-done", "operator", c=4, pc=2),
    ]
    lines = [
        line for n in range(4) for line in _started(f"worker-{n}", 1, f"occ_{n}", part=f"p{n}")
    ]
    assert _check_log(raised + lines)["c"] == 4
    # A retried occurrence (attempt 2) is work that cost an attempt.
    retried = _started("worker-0", 1, "occ_r")
    retried[-1] = {**retried[-1], "attempt": 2}
    with pytest.raises(AssertionError):
        _check_log(retried)
