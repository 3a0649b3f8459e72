"""An idempotency key is one occurrence however many processes enqueue it at once (SPEC §8;
issue 17 item 0), on both stores: several real processes race ``app.enqueue("mail", key=…)``
over the same keys in the same order, so they collide on each (they race ``ensure_job``
first); every process gets the same occurrence for a key, exactly one of them made it, and the
store holds one occurrence per key."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import jobledger
from tests.slow.acceptance import enqueue_race_process as proc

SCRIPT = Path(proc.__file__)
PROCESSES = 4
KEYS = 50


@pytest.fixture
def target(backend, tmp_path, request) -> str:
    if backend == "sqlite":
        path = tmp_path / "db" / "jobledger.sqlite3"
        jobledger.open_store(str(path)).close()
        return str(path)
    return str(request.getfixturevalue("postgres_database_url"))


def test_racing_processes_make_one_occurrence_per_key(target, tmp_path):
    go = tmp_path / "go"
    reports = [tmp_path / f"p{index}.json" for index in range(PROCESSES)]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                target,
                f"p{index}",
                str(index),
                str(KEYS),
                str(go),
                str(report),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for index, report in enumerate(reports)
    ]
    try:
        for report in reports:
            while not Path(f"{report}.ready").exists():
                failed = [p.returncode for p in processes if p.poll() not in (None, 0)]
                assert not failed, f"a process exited early: {failed}"
                time.sleep(0.01)
        go.write_text("go")
        outputs = [p.communicate(timeout=120)[0].decode(errors="replace") for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert [p.returncode for p in processes] == [0] * PROCESSES, outputs
    found = [json.loads(report.read_text()) for report in reports]
    assert [f["errors"] for f in found] == [[]] * PROCESSES, [f["errors"] for f in found]

    keys = [f"order-{index}" for index in range(KEYS)]
    for key in keys:
        answers = [f["found"][key] for f in found]
        assert len({occurrence_id for occurrence_id, _ in answers}) == 1, (key, answers)
        made = [deduplicated for _, deduplicated in answers].count(False)
        assert made == 1, (key, answers)  # exactly one process made it; the rest found it
    with jobledger.open_store(target) as store:
        page = store.list_occurrences(job_id="mail", limit=KEYS + 10)
        assert len(page.items) == KEYS and page.next_cursor is None
        assert Counter(o.trigger_key for o in page.items) == Counter(f"key:{k}" for k in keys)
        app = jobledger.App(store, authorize=jobledger.allow_all)
        again = app.enqueue("mail", key="order-7", payload={"order": "order-7"})
        assert again.deduplicated and again.id == found[0]["found"]["order-7"][0]
