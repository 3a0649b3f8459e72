"""The `jobledger` command, driven through `main(argv)` against a real SQLite file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jobledger.cli import main
from jobledger.cli.commands import parse_instant


@pytest.fixture
def target(tmp_path):
    return str(tmp_path / "store" / "jobs.sqlite3")


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    out = json.loads(captured.out) if captured.out.strip() else None
    return code, out, captured.err


def test_schema_creates_and_reports_the_store(capsys, target):
    code, out, _ = run(capsys, "--store", target, "schema")
    assert code == 0
    assert out["application_id"] == 0x4343534B
    assert out["schema_version"] == 2
    assert [m["name"] for m in out["migrations"]] == ["scheduler-kernel-v1", "jobledger-requeue-v2"]


def test_job_enqueue_history_roundtrip(capsys, target):
    code, job, _ = run(
        capsys,
        "--store",
        target,
        "create-job",
        "--id",
        "digest",
        "--kind",
        "email",
        "--principal",
        "user:alice",
        "--workspace",
        "w1",
        "--payload",
        '{"to": "a"}',
    )
    assert code == 0
    assert job["authority"]["principal"] == {"type": "user", "id": "alice"}
    assert job["authority"]["workspaceId"] == "w1"
    assert job["payload"] == {"to": "a"}

    code, occ, _ = run(
        capsys,
        "--store",
        target,
        "enqueue",
        "digest",
        "--at",
        "2026-01-01T00:00:00Z",
        "--trigger-key",
        "manual:1",
    )
    assert code == 0
    assert occ["scheduled_for"] == 1_767_225_600_000
    assert occ["status"] == "queued"
    assert occ["deduplicated"] is False

    code, again, _ = run(
        capsys,
        "--store",
        target,
        "enqueue",
        "digest",
        "--at",
        "1767225600000",
        "--trigger-key",
        "manual:1",
    )
    assert again["id"] == occ["id"] and again["deduplicated"] is True

    code, shown, _ = run(capsys, "--store", target, "occurrence", occ["id"])
    assert shown["id"] == occ["id"]

    code, events, _ = run(capsys, "--store", target, "history", "--job", "digest")
    assert [e["type"] for e in events] == ["occurrence_enqueued", "job_created"]


def test_disable_job_is_compare_and_swap(capsys, target):
    run(capsys, "--store", target, "create-job", "--id", "j", "--kind", "k", "--principal", "u:x")
    code, job, _ = run(capsys, "--store", target, "disable-job", "j", "--expected-revision", "1")
    assert code == 0 and job["enabled"] is False and job["revision"] == 2
    code, out, err = run(capsys, "--store", target, "enable-job", "j", "--expected-revision", "1")
    assert code == 1 and out is None
    assert "SCHEDULER_REVISION_CONFLICT" in err
    assert '"actualRevision": 2' in err


def test_requeue_of_a_dead_letter(capsys, target, clock):
    import jobledger

    with jobledger.open_store(target, clock=clock) as store:
        store.create_job(id="j", kind="k", authority={"principal": {"type": "u", "id": "x"}})
        occ = store.enqueue_occurrence(job_id="j", scheduled_for=clock(), trigger_key="t")
        claimed = store.claim_next(owner_id="w", lease_ms=1000)
        store.settle(
            occurrence_id=occ.id,
            owner_id="w",
            fence=claimed.fence,
            outcome="failed",
            retryable=False,
        )
    code, dead, _ = run(capsys, "--store", target, "dead-letters")
    assert [d["id"] for d in dead] == [occ.id]

    code, out, err = run(
        capsys,
        "--store",
        target,
        "requeue",
        occ.id,
        "--fence",
        "7",
        "--reason",
        "r",
        "--actor",
        "alice",
    )
    assert code == 1 and "SCHEDULER_REQUEUE_EVIDENCE_CONFLICT" in err

    code, requeued, _ = run(
        capsys,
        "--store",
        target,
        "requeue",
        occ.id,
        "--fence",
        "1",
        "--reason",
        "relay fixed",
        "--actor",
        "alice",
    )
    assert code == 0
    assert requeued["status"] == "retry_wait"
    assert requeued["max_attempts"] == 2
    code, events, _ = run(
        capsys, "--store", target, "history", "--occurrence", occ.id, "--limit", "1"
    )
    assert events[0]["type"] == "occurrence_requeued"
    assert events[0]["data"]["actor"] == "alice"
    assert events[0]["data"]["reason"] == "relay fixed"


@pytest.mark.parametrize(
    ("argv", "code", "fragment"),
    [
        (["job", "missing"], 1, "SCHEDULER_NOT_FOUND"),
        (["occurrence", "missing"], 1, "SCHEDULER_NOT_FOUND"),
        (
            ["enqueue", "j", "--at", "yesterday", "--trigger-key", "t"],
            2,
            "SCHEDULER_INVALID_ARGUMENT",
        ),
        (
            ["enqueue", "j", "--at", "2026-01-01T00:00:00", "--trigger-key", "t"],
            2,
            "needs an offset",
        ),
        (["create-job", "--id", "j", "--kind", "k", "--principal", "nocolon"], 2, "TYPE:ID"),
        (["history", "--limit", "0"], 2, "history limit must be a positive integer"),
    ],
)
def test_errors_are_coded_and_change_nothing(capsys, target, argv, code, fragment):
    assert run(capsys, "--store", target, "schema")[0] == 0
    result, out, err = run(capsys, "--store", target, *argv)
    assert result == code
    assert out is None
    assert fragment in err
    _, events, _ = run(capsys, "--store", target, "history")
    assert events == []


def test_missing_store_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("JOBLEDGER_STORE", raising=False)
    code, _, err = run(capsys, "history")
    assert code == 2 and "JOBLEDGER_STORE" in err


def test_store_from_environment(capsys, monkeypatch, target):
    monkeypatch.setenv("JOBLEDGER_STORE", target)
    code, out, _ = run(capsys, "schema")
    assert code == 0 and out["schema_version"] == 2


def test_console_script_entry_point(target):
    completed = subprocess.run(
        [sys.executable, "-m", "jobledger.cli", "--store", target, "schema"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["schema_version"] == 2


def test_parse_instant():
    assert parse_instant("0") == 0
    assert parse_instant("2026-01-01T01:00:00+01:00") == 1_767_225_600_000
