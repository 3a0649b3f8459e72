"""Group commit under SIGKILL (issue 29), on SQLite and PostgreSQL: a process whose threads
enqueue through one store (their calls grouped into shared write transactions) is killed at
random instants; every occurrence whose call had returned is committed, with its event, and the
store verifies. What a kill loses is only calls that had not returned."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jobledger
from tests.store.pg_support import postgres_database_url, postgres_template

__all__ = ["postgres_database_url", "postgres_template"]

PROCESS = Path(__file__).with_name("group_enqueue_process.py")
AUTHORITY = {"principal": {"type": "user", "id": "acceptance"}}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store" / "group.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


@pytest.mark.acceptance
def test_a_kill_mid_group_loses_only_calls_that_had_not_returned(target, tmp_path):
    options = {"listen": False} if target.startswith("postgresql://") else {}
    with jobledger.open_store(target, **options) as store:  # type: ignore[arg-type]
        store.create_job(id="j", kind="k", authority=AUTHORITY)
    rng = random.Random(20261205)
    returned: list[str] = []
    for kill in range(4):
        out = tmp_path / f"returned-{kill}.txt"
        process = subprocess.Popen(
            [sys.executable, str(PROCESS), target, "8", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text().count("\n") > 20):
            assert process.poll() is None, process.communicate()[0].decode()
            assert time.monotonic() < deadline, "the enqueuing process never got going"
            time.sleep(0.01)
        time.sleep(rng.uniform(0.05, 0.3))
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        lines = out.read_text().splitlines()
        # A line cut by the kill is no returned call: only whole lines count.
        whole = lines if out.read_text().endswith("\n") else lines[:-1]
        returned += [line for line in whole if line != "ready"]
    assert len(returned) > 80
    with jobledger.open_store(target, **options) as store:  # type: ignore[arg-type]
        missing = [i for i in returned if store.get_occurrence(i) is None]
        assert missing == []
        for occurrence_id in returned[:: max(1, len(returned) // 50)]:
            assert [e.type for e in store.history(occurrence_id=occurrence_id)] == [
                "occurrence_enqueued"
            ]
        assert store.verify().ok
