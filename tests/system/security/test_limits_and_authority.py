"""Oversize input and authority bypass attempts, on both stores.

* The 1 MiB limit on every JSON value (payloads, results, errors, triggers, authority) and the
  depth limit hold at every door — ``create_job``, ``enqueue``, ``enqueue_many``, ``settle`` —
  and a refused value writes nothing (a refused settle leaves the lease as it was).
* The runtime refuses to run without an explicit authorizer; only a decision whose ``allowed``
  is exactly ``True`` runs the handler (fail closed); an authorizer that raises runs nothing;
  and an authority forged inside a payload changes nothing: the authorizer and the handler see
  the job's snapshotted authority.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import jobledger
from jobledger.cli.parsing import MAX_JSON_INPUT_BYTES
from jobledger.contract import MAX_JSON_BYTES, MAX_JSON_DEPTH
from jobledger.engine.heartbeat import ManualHeartbeat

AUTHORITY = {"principal": {"type": "user", "id": "alice"}, "workspaceId": "ws-1"}


def _payload_of_size(size: int) -> dict[str, str]:
    """A JSON object whose canonical encoding is exactly ``size`` bytes."""
    overhead = len('{"p":""}')
    return {"p": "x" * (size - overhead)}


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_the_one_mib_limit_holds_at_every_door(store):
    at_limit = _payload_of_size(MAX_JSON_BYTES)
    over = _payload_of_size(MAX_JSON_BYTES + 1)
    store.create_job(id="j", kind="work", authority=AUTHORITY, payload=at_limit)
    assert len(jobledger.canonical_json(store.get_job("j").payload)) == MAX_JSON_BYTES
    with pytest.raises(jobledger.InvalidArgument):
        store.create_job(id="big", kind="work", authority=AUTHORITY, payload=over)
    assert store.get_job("big") is None
    with pytest.raises(jobledger.InvalidArgument):
        store.create_job(
            id="deep", kind="work", authority=AUTHORITY, payload=_nested(MAX_JSON_DEPTH + 2)
        )
    with pytest.raises(jobledger.InvalidArgument):
        store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t", payload=over)
    with pytest.raises(jobledger.InvalidArgument):
        store.enqueue_batch(
            [
                jobledger.EnqueueRequest(job_id="j", scheduled_for=0, trigger_key="a"),
                jobledger.EnqueueRequest(
                    job_id="j", scheduled_for=0, trigger_key="b", payload=over
                ),
            ]
        )
    assert store.count_occurrences() == []
    store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="ok", payload={"small": 1})
    claimed = store.claim_next(owner_id="w", lease_ms=60_000)
    assert claimed is not None
    for outcome, field in (("succeeded", "result"), ("failed", "error")):
        with pytest.raises(jobledger.InvalidArgument):
            store.settle(
                occurrence_id=claimed.id,
                owner_id="w",
                fence=claimed.fence,
                outcome=outcome,
                **{field: over},
            )
    still = store.get_occurrence(claimed.id)
    assert (still.status, still.lease_owner, still.fence) == ("running", "w", claimed.fence)
    with pytest.raises(jobledger.InvalidArgument):
        store.create_job(
            id="a", kind="work", authority={**AUTHORITY, "extra": "x" * MAX_JSON_BYTES}
        )
    assert store.verify().ok


def test_app_enqueue_refuses_oversize_payloads(target):
    with jobledger.App(target, authorize=jobledger.allow_all) as app:
        app.ensure_job("j", "work")
        with pytest.raises(jobledger.InvalidArgument):
            app.enqueue("j", payload=_payload_of_size(MAX_JSON_BYTES + 1))
        with pytest.raises(jobledger.InvalidArgument):
            app.enqueue_many("j", [{"a": 1}, _payload_of_size(MAX_JSON_BYTES + 1)])
        assert app.store.count_occurrences() == []


# -- authority ---------------------------------------------------------------------------------


def test_the_runtime_refuses_to_run_without_an_explicit_authorizer(store):
    for authorize in (None, True, "allow", 1):
        with pytest.raises(jobledger.SchedulerError) as refused:
            jobledger.Runtime(store, authorize=authorize, heartbeat=ManualHeartbeat())  # type: ignore[arg-type]
        assert refused.value.code.startswith("SCHEDULER_RUNTIME_")
    app = jobledger.App(store)
    app.handler("work")(lambda ctx: None)
    with pytest.raises(jobledger.SchedulerError) as refused:
        app.runtime()
    assert refused.value.code == "SCHEDULER_RUNTIME_AUTHORIZER_REQUIRED"


DENIALS = [
    pytest.param(lambda request: True, id="bare-true"),
    pytest.param(lambda request: "true", id="string-true"),
    pytest.param(lambda request: 1, id="one"),
    pytest.param(lambda request: {"allowed": "yes"}, id="mapping-yes"),
    pytest.param(lambda request: {"allowed": 1}, id="mapping-one"),
    pytest.param(lambda request: None, id="none"),
    pytest.param(lambda request: jobledger.Decision(allowed=False, reason="no"), id="denied"),
    pytest.param(lambda request: {"allowed": True, "principal": "root"}["missing"], id="raises"),
]


@pytest.mark.parametrize("authorize", DENIALS)
def test_anything_but_an_explicit_allow_never_runs_the_handler(store, authorize):
    ran: list[str] = []
    store.create_job(id="j", kind="work", authority=AUTHORITY, max_attempts=1)
    occurrence = store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    runtime = jobledger.Runtime(
        store,
        authorize=authorize,
        handlers={"work": lambda ctx: ran.append(ctx.occurrence_id)},
        heartbeat=ManualHeartbeat(),
    )
    try:
        result = runtime.run_next()
    finally:
        runtime.close()
    assert ran == []
    assert result.status != "succeeded"
    assert store.get_occurrence(occurrence.id).status != "succeeded"


def test_a_forged_authority_in_the_payload_changes_nothing(store):
    forged = {"principal": {"type": "admin", "id": "root"}, "workspaceId": "ws-admin"}
    seen: list[dict[str, Any]] = []

    def authorize(request: jobledger.AuthorizationRequest) -> jobledger.Decision:
        seen.append(request.authority)
        allowed = request.authority["principal"]["id"] == "alice"
        return jobledger.Decision(allowed=allowed)

    handled: list[dict[str, Any]] = []
    store.create_job(id="j", kind="work", authority=AUTHORITY)
    occurrence = store.enqueue_occurrence(
        job_id="j",
        scheduled_for=0,
        trigger_key="t",
        payload={"authority": forged, "principal": forged["principal"], "workspaceId": "ws-admin"},
    )
    assert occurrence.authority["principal"] == AUTHORITY["principal"]
    runtime = jobledger.Runtime(
        store,
        authorize=authorize,
        handlers={"work": lambda ctx: handled.append(ctx.authority)},
        heartbeat=ManualHeartbeat(),
    )
    try:
        assert runtime.run_next().status == "succeeded"
        # The forged workspace does not reach work filtered to it either.
        store.enqueue_occurrence(
            job_id="j", scheduled_for=1, trigger_key="u", payload={"workspaceId": "ws-admin"}
        )
        assert runtime.run_next(workspace_id="ws-admin").status == "idle"
    finally:
        runtime.close()
    assert [a["principal"] for a in seen] == [AUTHORITY["principal"]]
    assert [a["principal"] for a in handled] == [AUTHORITY["principal"]]
    assert handled[0]["workspaceId"] == "ws-1"


# -- the limits through the command line ----------------------------------------------------------


def _cli(target: str, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    import io

    from jobledger.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--db", target, *argv],
        env={},
        stdin=io.StringIO(stdin),
        stdout=out,
        stderr=err,
        sleep=lambda seconds: None,
    )
    return code, out.getvalue(), err.getvalue()


def _deep_json(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def _occurrences(target: str) -> list[jobledger.Occurrence]:
    with jobledger.open_store(target) as store:
        return list(store.list_occurrences(limit=1000).items)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 2_000, 10_000, 100_000])
def test_a_deeply_nested_payload_on_the_command_line_is_refused_cleanly(target, tmp_path, depth):
    jobledger.open_store(target, migrate=True).close()
    assert _cli(target, "job", "add", "j", "--kind", "work")[0] == 0
    nested = _deep_json(depth)
    path = tmp_path / "deep.json"
    path.write_text(nested)
    for argv, stdin in (
        (["enqueue", "j", "--payload", nested], ""),
        (["enqueue", "j", "--payload", f"@{path}"], ""),
        (["enqueue", "j", "--payload", "-"], nested),
        (["job", "add", "k", "--kind", "work", "--payload", nested], ""),
        (["job", "update", "j", "--payload", nested], ""),
    ):
        code, _out, err = _cli(target, *argv, stdin=stdin)
        assert code == 2, err
        assert err.startswith("error: SCHEDULER_INVALID_ARGUMENT: ")
        assert "depth" in err or "nested deeper than 64" in err, err
        assert "INTERNAL" not in err and "Recursion" not in err
    assert _occurrences(target) == []
    with jobledger.open_store(target) as store:
        assert [job.id for job in store.list_jobs()] == ["j"]
        assert store.get_job("j").revision == 1


def test_a_900_kib_payload_through_a_file_and_through_stdin(target, tmp_path):
    jobledger.open_store(target, migrate=True).close()
    payload = _payload_of_size(900 * 1024)
    text = json.dumps(payload, indent=2)  # pretty-printed files are fine
    path = tmp_path / "payload.json"
    path.write_text(text, encoding="utf-8")
    assert _cli(target, "job", "add", "j", "--kind", "work", "--payload", f"@{path}")[0] == 0
    code, out, err = _cli(target, "--json", "enqueue", "j", "--payload", "-", stdin=text)
    assert code == 0, err
    assert json.loads(out)["occurrences"][0]["payload"] == payload
    with jobledger.open_store(target) as store:
        assert store.get_job("j").payload == payload
        assert [o.payload for o in store.list_occurrences(limit=10).items] == [payload]


def test_a_payload_over_one_mib_through_a_file_or_stdin_is_refused(target, tmp_path):
    jobledger.open_store(target, migrate=True).close()
    assert _cli(target, "job", "add", "j", "--kind", "work")[0] == 0
    over = json.dumps(_payload_of_size(MAX_JSON_BYTES + 1))
    path = tmp_path / "over.json"
    path.write_text(over)
    endless = tmp_path / "endless.json"  # more than any JSON option reads: not read to its end
    endless.write_text(" " * (MAX_JSON_INPUT_BYTES + 1) + "1")
    for argv, stdin, message in (
        (["enqueue", "j", "--payload", f"@{path}"], "", "exceeds 1048576 encoded bytes"),
        (["enqueue", "j", "--payload", "-"], over, "exceeds 1048576 encoded bytes"),
        (["job", "update", "j", "--payload", f"@{path}"], "", "exceeds 1048576 encoded bytes"),
        (["enqueue", "j", "--payload", f"@{endless}"], "", "is larger than 8 MiB"),
    ):
        code, _out, err = _cli(target, *argv, stdin=stdin)
        assert code == 2, err
        assert err.startswith("error: SCHEDULER_INVALID_ARGUMENT: ") and message in err, err
    assert _occurrences(target) == []
    with jobledger.open_store(target) as store:
        assert store.get_job("j").revision == 1


def test_a_missing_or_unreadable_payload_file_is_a_clear_usage_error(target, tmp_path):
    jobledger.open_store(target, migrate=True).close()
    assert _cli(target, "job", "add", "j", "--kind", "work")[0] == 0
    missing = tmp_path / "missing.json"
    for value, message in (
        (f"@{missing}", f"argument --payload: cannot read @{str(missing)!r}: No such file"),
        (f"@{tmp_path}", "Is a directory"),
        ("@", "@ must be followed by a file's path"),
    ):
        code, _out, err = _cli(target, "enqueue", "j", "--payload", value)
        assert code == 2, err
        assert message in err.splitlines()[0], err
        assert err.splitlines()[1] == "hint: see `jobledger enqueue --help`"
    invalid_utf8 = tmp_path / "latin1.json"
    invalid_utf8.write_bytes(b'{"name": "caf\xe9"}')
    code, _out, err = _cli(target, "enqueue", "j", "--payload", f"@{invalid_utf8}")
    assert code == 2
    assert "is not valid UTF-8: the byte 0xe9 at byte 13" in err
    # Two options cannot both read stdin.
    argv = ["job", "add", "k", "--kind", "w", "--payload", "-", "--payload", "-"]
    code, _out, err = _cli(target, *argv, stdin="{}")
    assert code == 2 and "stdin (-) was already read" in err
    assert _occurrences(target) == []


def test_stdin_of_a_real_process_is_read_as_utf8_bytes(target, tmp_path):
    import os
    import subprocess
    import sys

    jobledger.open_store(target, migrate=True).close()
    assert _cli(target, "job", "add", "j", "--kind", "work")[0] == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "jobledger.cli", "--db", target, "--json", "enqueue", "j"]
    payload = {"name": "café \U0001f600", "big": "x" * (900 * 1024)}
    done = subprocess.run(
        [*command, "--payload", "-"],
        input=b"\xef\xbb\xbf" + json.dumps(payload, ensure_ascii=False).encode(),  # BOM
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [*command, "--payload", "-"], input=b'{"a": "\xff"}', capture_output=True, env=env
    )
    assert done.returncode == 2
    assert b"stdin is not valid UTF-8: the byte 0xff at byte 7" in done.stderr
    assert [o.payload for o in _occurrences(target)] == [payload]
