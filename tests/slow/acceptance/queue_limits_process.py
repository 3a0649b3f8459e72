"""A process for test_queue_limits: a worker claiming straight from the store, or the operator
pausing, resuming and re-declaring the limited queue. Every step is one JSON line appended to
a shared log (one ``write`` on an ``O_APPEND`` descriptor, so lines from every process land
whole and in real-time order).

Usage: python queue_limits_process.py TARGET ROLE NAME SEED GO_FILE STOP_FILE LOG_FILE REPORT

Worker lines, in order: ``claiming`` (before the claim call), ``claimed`` (after it returns,
with the ids), ``start`` for each claimed occurrence (its queue, partition, fence), then after
a random handler time ``stop`` for each, logged before its settle is called. So a logged
start–stop interval lies inside the store's running interval (claim commit to settle commit).

Operator lines: ``pause-intent``/``pause-done``, ``resume-intent``/``resume-done``,
``declare-intent``/``declare-done`` (with the limits), around each store call.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import jobledger
from jobledger import Queue, Rate

LEASE_MS = 600_000  # far longer than the run: no lease is lost, nothing is reclaimed
LIMITED = "limited"
RATE = Rate(40, timedelta(seconds=1))
WORKER_CONCURRENCY = 2
OPERATOR_ACTIONS = 30


class Log:
    def __init__(self, path: str, name: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.name = name

    def __call__(self, event: str, **data: Any) -> None:
        line = json.dumps({"e": event, "p": self.name, **data}, separators=(",", ":")) + "\n"
        os.write(self.fd, line.encode())


def declaration(concurrency: int, partition_concurrency: int) -> Queue:
    return Queue(
        LIMITED,
        concurrency=concurrency,
        worker_concurrency=WORKER_CONCURRENCY,
        partition_concurrency=partition_concurrency,
        rate=RATE,
    )


def wait_for(path: str) -> None:
    deadline = time.monotonic() + 60
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)


def work(store: jobledger.Store, name: str, rng: random.Random, stop: str, log: Log) -> int:
    settled = 0
    step = 0
    while not Path(stop).exists():
        step += 1
        log("claiming", k=step)
        claimed = store.claim_batch(owner_id=name, lease_ms=LEASE_MS, limit=rng.randint(1, 3))
        log("claimed", k=step, ids=[o.id for o in claimed])
        if not claimed:
            time.sleep(0.003)  # idle poll
            continue
        for occurrence in claimed:
            log(
                "start",
                id=occurrence.id,
                q=occurrence.queue,
                part=occurrence.partition,
                fence=occurrence.fence,
                attempt=occurrence.attempt,
            )
        time.sleep(rng.uniform(0, 0.015))  # the handler's work
        for occurrence in claimed:
            log("stop", id=occurrence.id, q=occurrence.queue, part=occurrence.partition)
            store.settle(
                occurrence_id=occurrence.id,
                owner_id=name,
                fence=occurrence.fence,
                outcome="succeeded",
            )
            settled += 1
    return settled


def operate(store: jobledger.Store, rng: random.Random, log: Log) -> int:
    for _ in range(OPERATOR_ACTIONS):
        time.sleep(rng.uniform(0.01, 0.06))
        action = rng.choice(["pause", "resume", "declare", "declare"])
        if action == "pause":
            log("pause-intent")
            store.pause_queue(LIMITED, reason="property test", actor="operator")
            log("pause-done")
        elif action == "resume":
            log("resume-intent")
            store.resume_queue(LIMITED, actor="operator")
            log("resume-done")
        else:
            limits = (rng.randint(1, 4), rng.randint(1, 2))
            log("declare-intent", c=limits[0], pc=limits[1])
            store.declare_queue(declaration(*limits), actor="operator")
            log("declare-done", c=limits[0], pc=limits[1])
    # Leave the queue runnable so the backlog drains.
    log("resume-intent")
    store.resume_queue(LIMITED, actor="operator")
    log("resume-done")
    return OPERATOR_ACTIONS


def main(argv: list[str]) -> int:
    target, role, name, seed, go, stop, log_file, report = argv
    log = Log(log_file, name)
    errors: list[str] = []
    done = 0
    try:
        with jobledger.open_store(target) as store:
            Path(f"{report}.ready").write_text("ready")
            wait_for(go)
            rng = random.Random(int(seed))
            if role == "operator":
                done = operate(store, rng, log)
            else:
                done = work(store, name, rng, stop, log)
    except BaseException:
        errors.append(traceback.format_exc())
    Path(report).write_text(json.dumps({"name": name, "done": done, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
