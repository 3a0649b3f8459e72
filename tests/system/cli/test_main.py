"""The command as a whole: exit statuses, one-line errors, --debug, interrupts, colour, --tz,
and the real entry points (`jobledger`, `python -m jobledger`) in subprocesses."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jobledger.cli.jobs as jobs_module
from jobledger import errors
from jobledger.cli import main
from jobledger.cli.errors import exit_code_for
from tests.system.cli.conftest import AUTHORITY, Cli

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.InvalidArgument("x"), 2),
        (errors.SchedulerError("x", code="SCHEDULER_CONFIRMATION_REQUIRED"), 2),
        (errors.NotFound("x"), 3),
        (errors.Conflict("x"), 4),
        (errors.RevisionConflict("x"), 4),
        (errors.RequeueConflict("x"), 4),
        (errors.IdempotencyPayloadMismatch("x"), 4),
        (errors.Conflict("x", code="SCHEDULER_JOB_HAS_LIVE_OCCURRENCES"), 4),
        (errors.SchedulerError("x", code="SCHEDULER_CANCEL_CONFLICT"), 4),
        (errors.JobDisabled("x"), 4),
        (errors.StoreNotFound("x"), 5),
        (errors.MigrationRequired("x"), 5),
        (errors.SchemaUnknown("x"), 5),
        (errors.SchemaCorrupt("x"), 5),
        (errors.StorageUnavailable("x"), 5),
        (errors.StoreMisconfigured("x"), 5),
        (errors.StoreClosed("x"), 5),
        (errors.UnsafePath("x"), 5),
        (errors.DataCorrupt("x"), 5),
        (errors.LeaseLost("x"), 1),
        (errors.RuntimeRejection("x"), 1),
        (errors.SchedulerError("x", code="SCHEDULER_ABORTED"), 1),
    ],
)
def test_exit_statuses(error, status):
    assert exit_code_for(error) == status


def test_usage(sqlite_cli, capsys):
    sqlite_cli().assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    assert main(["--help"]) == 0
    assert "usage: jobledger" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("jobledger ")
    sqlite_cli("--tz", "Mars/Olympus", "job", "list").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )
    sqlite_cli("--actor", "   ", "job", "list").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )


def test_debug_adds_the_traceback(sqlite_cli):
    quiet = sqlite_cli("job", "show", "nope")
    assert "Traceback" not in quiet.err
    loud = sqlite_cli("--debug", "job", "show", "nope")
    assert loud.code == 3
    assert "Traceback" in loud.err and "error: SCHEDULER_NOT_FOUND: " in loud.err


def test_a_bug_is_still_one_coded_line(sqlite_cli, monkeypatch):
    def broken(ctx, args):
        raise RuntimeError("something unexpected")

    monkeypatch.setattr(jobs_module, "_get_job", lambda *a: broken(None, None))
    result = sqlite_cli("job", "show", "x")
    result.assert_one_line_error("SCHEDULER_INTERNAL_ERROR", 1)
    assert "RuntimeError: something unexpected" in result.err and "--debug" in result.err
    assert "Traceback" in sqlite_cli("--debug", "job", "show", "x").err


def test_ctrl_c_is_130(sqlite_cli, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs_module, "_get_job", interrupted)
    result = sqlite_cli("job", "show", "x")
    assert result.code == 130
    assert result.err.strip() == "error: SCHEDULER_INTERRUPTED: interrupted"


def test_a_closed_pipe_is_not_an_error(sqlite_cli):
    class Closed(io.StringIO):
        def write(self, text):
            raise BrokenPipeError

    err = io.StringIO()
    code = main(
        ["--db", sqlite_cli.target, "job", "list"], env=sqlite_cli.env, stdout=Closed(), stderr=err
    )
    assert code == 0 and err.getvalue() == ""


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_colour_only_on_a_terminal_without_no_color(sqlite_cli):
    with sqlite_cli.open() as store:
        store.create_job(id="j", kind="k", authority=AUTHORITY)

    def run(env, stdout):
        main(
            ["--db", sqlite_cli.target, "job", "list"], env=env, stdout=stdout, stderr=io.StringIO()
        )
        return stdout.getvalue()

    assert "\x1b[" in run({}, Terminal())
    assert "\x1b[" not in run({"NO_COLOR": "1"}, Terminal())
    assert "\x1b[" not in run({"TERM": "dumb"}, Terminal())
    assert "\x1b[" not in run({}, io.StringIO())


def test_instants_print_in_tz_and_json_stays_utc(sqlite_cli):
    with sqlite_cli.open() as store:
        store.create_job(id="j", kind="k", authority=AUTHORITY)
    sqlite_cli.ok("enqueue", "j", "--at", "2026-07-01T12:00:00Z")
    text = sqlite_cli.ok("--tz", "Asia/Kolkata", "occurrence", "list").out
    assert "2026-07-01T17:30:00+05:30" in text
    document = sqlite_cli.json("--tz", "Asia/Kolkata", "occurrence", "list")
    assert document["occurrences"][0]["scheduledFor"] == "2026-07-01T12:00:00Z"


def _run(*argv, env=None):
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )


def test_the_entry_points_in_subprocesses(tmp_path):
    target = str(tmp_path / "db" / "jobs.sqlite3")
    script = Path(sys.executable).with_name("jobledger")
    assert script.exists(), "the package must be installed (pip install -e .)"
    missing = _run(str(script), "--db", target, "stats")
    assert missing.returncode == 5
    assert missing.stderr.startswith("error: SCHEDULER_STORE_NOT_FOUND: ")
    assert "Traceback" not in missing.stderr
    created = _run(str(script), "db", "init", env={"JOBLEDGER_DB": target})
    assert created.returncode == 0 and created.stdout.startswith("created ")
    garbage = _run(sys.executable, "-m", "jobledger", "--db", target, "enqueue", "j", "--at", "²")
    assert garbage.returncode == 2
    assert garbage.stderr.splitlines()[0].startswith(
        "error: SCHEDULER_INVALID_ARGUMENT: argument --at: not an instant: '²'"
    )
    listed = _run(sys.executable, "-m", "jobledger.cli", "--db", target, "--json", "job", "list")
    assert listed.returncode == 0 and listed.stdout.startswith("{")


def test_web_refuses_a_missing_store_before_serving(tmp_path, clean_env, monkeypatch):
    from jobledger.cli import web

    if not web.available():
        pytest.skip("the web extra is not installed")
    served = []
    monkeypatch.setattr("jobledger.web.cli.run", lambda args, store=None: served.append(args) or 0)
    missing = tmp_path / "none" / "jobs.sqlite3"
    Cli(str(missing), clean_env)("web").assert_one_line_error("SCHEDULER_STORE_NOT_FOUND", 5)
    assert served == [] and not missing.parent.exists()
    target = tmp_path / "db" / "jobs.sqlite3"
    Cli(str(target), clean_env).ok("db", "init")
    assert Cli(str(target), clean_env)("web", "--port", "0").code == 0
    assert [args.target for args in served] == [str(target)]


def test_web_without_its_extra_is_one_coded_line(sqlite_cli, monkeypatch):
    from jobledger.cli import web

    monkeypatch.setattr(web, "_web_cli", lambda: None)
    result = sqlite_cli("web", "--port", "8000")
    result.assert_one_line_error("SCHEDULER_EXTRA_MISSING", 1)
    assert "pip install 'jobledger[web]'" in result.err


def test_cli_runner_uses_no_default_store(clean_env):
    # The fixtures never fall back to the user's real data directory.
    assert "jobledger" not in os.listdir(clean_env["HOME"])
    Cli(None, clean_env)("job", "list")
    assert not Path(clean_env["HOME"], ".local").exists()
