"""`jobledger worker MODULE:APP`: a flag for every WorkerOptions field, --until-idle draining,
the app deciding its store (and --db never silently ignored), --migrate, loading errors."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid
from dataclasses import fields
from datetime import timedelta
from pathlib import Path

import pytest

import jobledger
from jobledger.cli import build_parser
from jobledger.cli.timefmt import iso_utc
from jobledger.cli.worker import OPTION_FLAGS, options_from_args, same_target
from jobledger.store.migrations import LATEST_VERSION
from tests.store.sqlite.handmade import listing, make_v2
from tests.system.cli.conftest import AUTHORITY, Cli

# Values the generic rule below would get wrong (bounds that depend on other fields).
SPECIAL = {
    "renew_interval": ("20s", timedelta(seconds=20)),
    "retention": ("2h", timedelta(hours=2)),
}


def _non_default(field):
    """A flag value that differs from the field's default, and what it should become."""
    if field.name in SPECIAL:
        return SPECIAL[field.name]
    default = field.default
    annotation = str(field.type)
    if "bool" in annotation:
        return None, not default
    if "timedelta" in annotation:
        return "2m", timedelta(minutes=2)
    if "frozenset" in annotation:
        return "alpha, beta", frozenset({"alpha", "beta"})
    if "float" in annotation:
        return "0.25", 0.25
    if "int" in annotation:
        return "9", 9
    return "worker-x1", "worker-x1"


@pytest.mark.parametrize("field", fields(jobledger.WorkerOptions), ids=lambda f: f.name)
def test_every_worker_option_has_a_flag_that_reaches_it(field):
    flag = OPTION_FLAGS[field.name]
    text, expected = _non_default(field)
    if text is None:  # a boolean: --x or --no-x
        argv = [flag if expected else "--no-" + flag[2:]]
    else:
        argv = [flag, text]
    args = build_parser().parse_args(["worker", "some.module:app", *argv])
    options = options_from_args(args)
    assert getattr(options, field.name) == expected
    assert getattr(options, field.name) != field.default
    help_text = build_parser()._subparsers._group_actions[0].choices["worker"].format_help()
    assert flag in help_text


def test_no_flags_means_the_library_defaults():
    args = build_parser().parse_args(["worker", "m:app"])
    assert options_from_args(args) == jobledger.WorkerOptions()
    kinds = build_parser().parse_args(["worker", "m:app", "--kinds", "a,b", "--kinds", "c"])
    assert options_from_args(kinds).kinds == frozenset({"a", "b", "c"})


def test_same_target():
    assert same_target("/tmp/x/../y/db.sqlite3", "sqlite:////tmp/y/db.sqlite3")
    assert not same_target("/tmp/a.sqlite3", "/tmp/b.sqlite3")
    assert same_target("postgresql://u:secret@h:5432/db", "postgres://u@h:5432/db")
    assert not same_target("postgresql://u@h/db1", "postgresql://u@h/db2")
    assert not same_target(":memory:", ":memory:")


# -- an app module per test ----------------------------------------------------------------------


@pytest.fixture
def app_module(tmp_path, monkeypatch):
    """Write an app module into tmp_path and return its name; ``target`` fixes its store
    (default: $JOBLEDGER_DB, read at import)."""

    def make(target: str | None = None, body: str = "") -> str:
        name = f"cli_app_{uuid.uuid4().hex[:10]}"
        store = repr(target) if target is not None else 'os.environ["JOBLEDGER_DB"]'
        source = textwrap.dedent(
            f"""
            import os
            import jobledger

            app = jobledger.App({store}, name="cli-test", authorize=jobledger.allow_all)

            @app.handler("echo")
            def echo(ctx):
                return {{"echo": ctx.payload}}
            """
        ) + textwrap.dedent(body)
        (tmp_path / f"{name}.py").write_text(source)
        return name

    monkeypatch.delenv("JOBLEDGER_DB", raising=False)
    return make


def test_until_idle_drains_the_queue_and_plans_first(cli, db, tmp_path, app_module):
    name = app_module()
    with cli.open() as store:
        store.create_job(id="e", kind="echo", authority=AUTHORITY)
        for n in range(7):
            store.enqueue_occurrence(job_id="e", scheduled_for=0, trigger_key=f"t{n}", payload=n)
    cli.ok("job", "add", "once", "--kind", "echo", "--at", "2020-01-01T00:00:00Z")
    result = cli(
        "--json",
        "worker",
        f"{name}:app",
        "--app-dir",
        str(tmp_path),
        "--until-idle",
        "--concurrency",
        "2",
        "--poll-interval",
        "50ms",
        "--log-level",
        "warning",
    )
    assert result.code == 0, result.err
    summary = result.json
    assert summary["statuses"] == {"succeeded": 8}
    assert summary["released"] == [] and summary["forced"] is False
    assert "planned 1 occurrence(s)" in result.err
    assert "idle: drained 8" in result.err
    with cli.open() as store:
        counts = {c.status: c.count for c in store.count_occurrences()}
        assert counts == {"succeeded": 8}
        results = sorted(
            o.result["echo"] for o in store.list_occurrences(job_id="e", limit=100).items
        )
        assert results == list(range(7))
        workers = store.list_workers(stopped_since=0)
        assert workers and workers[0].info["concurrency"] == 2


def test_until_idle_with_nothing_to_do_exits_at_once(cli, tmp_path, app_module):
    result = cli("worker", f"{app_module()}:app", "--app-dir", str(tmp_path), "--until-idle")
    assert result.code == 0, result.err
    assert "worker stopped: nothing run" in result.out


def test_the_app_decides_its_store_and_db_is_never_ignored(tmp_path, clean_env, app_module):
    own = tmp_path / "own" / "jobs.sqlite3"
    jobledger.open_store(own).close()
    name = app_module(str(own))
    cli = Cli(None, clean_env)
    argv = ("worker", f"{name}:app", "--app-dir", str(tmp_path), "--until-idle")
    other = tmp_path / "other.sqlite3"
    refused = cli(*argv, db=str(other))
    refused.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    assert str(own) in refused.err and "the app decides its store" in refused.err
    from_env = cli(*argv, env={**clean_env, "JOBLEDGER_DB": str(other)})
    from_env.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    assert "$JOBLEDGER_DB names" in from_env.err
    assert not other.exists()
    assert cli(*argv, db=f"sqlite:///{own}").code == 0  # the same store, spelled differently
    assert cli(*argv).code == 0  # no --db: the app's store
    cli(*argv, "--pg-schema", "x").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


def test_db_is_exported_to_apps_that_read_it(tmp_path, clean_env, app_module):
    target = tmp_path / "exported" / "jobs.sqlite3"
    jobledger.open_store(target).close()
    name = app_module()  # reads $JOBLEDGER_DB
    result = Cli(str(target), clean_env)(
        "worker", f"{name}:app", "--app-dir", str(tmp_path), "--until-idle"
    )
    assert result.code == 0, result.err
    assert f"on {target}" in result.err


def test_the_worker_creates_or_upgrades_only_with_migrate(tmp_path, clean_env, app_module):
    missing = tmp_path / "fresh" / "jobs.sqlite3"
    name = app_module(str(missing))
    cli = Cli(None, clean_env)
    argv = ("worker", f"{name}:app", "--app-dir", str(tmp_path), "--until-idle")
    refused = cli(*argv)
    refused.assert_one_line_error("SCHEDULER_STORE_NOT_FOUND", 5)
    assert "--migrate" in refused.err
    assert not missing.parent.exists()
    assert cli(*argv, "--migrate").code == 0
    assert missing.exists()

    old = tmp_path / "old" / "v2.sqlite3"
    make_v2(old)
    before = listing(old.parent)
    old_name = app_module(str(old))
    old_argv = ("worker", f"{old_name}:app", "--app-dir", str(tmp_path), "--until-idle")
    cli(*old_argv).assert_one_line_error("SCHEDULER_MIGRATION_REQUIRED", 5)
    assert listing(old.parent) == before
    upgraded = cli(*old_argv, "--migrate")
    assert upgraded.code == 0, upgraded.err
    assert f"is at schema v{LATEST_VERSION}" in upgraded.err
    with jobledger.open_store(old, migrate=False) as store:
        assert store.schema_info().schema_version == LATEST_VERSION


@pytest.mark.parametrize(
    ("reference", "body", "code", "exit_code", "needle"),
    [
        ("no_such_module_xyz:app", "", "SCHEDULER_INVALID_ARGUMENT", 2, "no module named"),
        ("{name}", "", "SCHEDULER_INVALID_ARGUMENT", 2, "MODULE:APP"),
        ("{name}:nope", "", "SCHEDULER_INVALID_ARGUMENT", 2, "has no attribute"),
        ("{name}:echo", "", "SCHEDULER_INVALID_ARGUMENT", 2, "not a jobledger.App"),
        (
            "{name}:app",
            "raise RuntimeError('boom at import')\n",
            "SCHEDULER_APP_IMPORT_FAILED",
            1,
            "boom at import",
        ),
        (
            "{name}:app",
            "import not_installed_dependency_xyz\n",
            "SCHEDULER_APP_IMPORT_FAILED",
            1,
            "not_installed_dependency_xyz",
        ),
    ],
)
def test_loading_errors(reference, body, code, exit_code, needle, sqlite_cli, tmp_path, app_module):
    name = app_module(sqlite_cli.target, body)
    result = sqlite_cli("worker", reference.format(name=name), "--app-dir", str(tmp_path), db=None)
    result.assert_one_line_error(code, exit_code)
    assert needle in result.err


@pytest.mark.parametrize(
    "argv",
    [
        ("--concurrency", "0"),
        ("--concurrency", "5000"),
        ("--lease", "500ms"),
        ("--renew-interval", "2m"),
        ("--poll-jitter", "1.5"),
        ("--poll-jitter", "nan"),
        ("--kinds", ","),
        ("--log-level", "loud"),
    ],
)
def test_bad_worker_options_are_usage_errors(argv, sqlite_cli, tmp_path, app_module):
    name = app_module(sqlite_cli.target)
    result = sqlite_cli("worker", f"{name}:app", "--app-dir", str(tmp_path), *argv, db=None)
    result.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


def test_the_app_dir_defaults_to_the_current_directory(
    sqlite_cli, tmp_path, app_module, monkeypatch
):
    name = app_module(sqlite_cli.target)
    monkeypatch.chdir(tmp_path)
    result = sqlite_cli("worker", f"{name}:app", "--until-idle", db=None)
    assert result.code == 0, result.err


def test_worker_kinds_limit_what_is_drained(sqlite_cli, tmp_path, app_module):
    name = app_module(
        sqlite_cli.target,
        """
        @app.handler("other")
        def other(ctx):
            return None
    """,
    )
    with sqlite_cli.open() as store:
        store.create_job(id="e", kind="echo", authority=AUTHORITY)
        store.create_job(id="o", kind="other", authority=AUTHORITY)
        store.enqueue_occurrence(job_id="e", scheduled_for=0, trigger_key="t")
        store.enqueue_occurrence(job_id="o", scheduled_for=0, trigger_key="t")
    result = sqlite_cli(
        "--json",
        "worker",
        f"{name}:app",
        "--app-dir",
        str(tmp_path),
        "--until-idle",
        "--kinds",
        "other",
        db=None,
    )
    assert result.code == 0, result.err
    assert result.json["statuses"] == {"succeeded": 1}
    with sqlite_cli.open() as store:
        assert {c.kind: c.status for c in store.count_occurrences()} == {
            "echo": "queued",
            "other": "succeeded",
        }


def test_examples_worker_app_is_importable(sqlite_cli, monkeypatch):
    root = Path(__file__).resolve().parents[3]
    monkeypatch.setenv("JOBLEDGER_DB", sqlite_cli.target)
    result = sqlite_cli(
        "worker", "examples.worker_app:app", "--app-dir", str(root), "--until-idle", db=None
    )
    assert result.code == 0, result.err


# -- --until-idle: retries and delays within the horizon, counted per occurrence ----------------

FLAKY_APP = """
import os
from datetime import timedelta

import jobledger
from jobledger.testing import FakeClock

clock = FakeClock()
app = jobledger.App(
    os.environ["JOBLEDGER_DB"], name="cli-flaky", authorize=jobledger.allow_all, clock=clock
)

@app.handler("flaky")
def flaky(ctx):
    # "ok-after-N": fail (retry one second later) until attempt N; "never": retry in 10 minutes.
    plan = ctx.payload
    if plan == "never":
        raise jobledger.Retry("not yet", delay=timedelta(minutes=10))
    if ctx.occurrence.attempt < int(plan.rsplit("-", 1)[1]):
        raise jobledger.Retry("again", delay=timedelta(seconds=1))
    return {"attempt": ctx.occurrence.attempt}
"""


@pytest.fixture
def flaky_app(tmp_path, monkeypatch):
    """An app on a FakeClock, and a ``sleep`` for the command that moves that clock instead of
    waiting (so waiting for a retry takes no time)."""
    name = f"cli_flaky_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(FLAKY_APP)
    monkeypatch.delenv("JOBLEDGER_DB", raising=False)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        sys.modules[name].clock.advance(round(seconds * 1000))

    yield name, sleep, slept
    sys.modules.pop(name, None)


def _enqueue_flaky(cli: Cli, *plans: str, available_at: int | None = None) -> None:
    # On the app's timeline (a FakeClock from its start): a row's instants never go back, so
    # rows written at today's time would keep a worker on 2026-01-01 waiting for today.
    from jobledger.testing import FakeClock

    with cli.open(FakeClock()) as store:
        if store.get_job("flaky") is None:
            store.create_job(id="flaky", kind="flaky", authority=AUTHORITY, max_attempts=5)
        for plan in plans:
            store.enqueue_occurrence(
                job_id="flaky",
                scheduled_for=available_at or 0,
                available_at=available_at,
                trigger_key=f"t-{plan}-{uuid.uuid4().hex[:6]}",
                payload=plan,
            )


def _until_idle(cli: Cli, tmp_path, name: str, sleep, *extra: str):
    return cli(
        "--json",
        "worker",
        f"{name}:app",
        "--app-dir",
        str(tmp_path),
        "--until-idle",
        "--no-planner",
        "--poll-interval",
        "20ms",
        "--log-level",
        "warning",
        *extra,
        sleep=sleep,
    )


def test_until_idle_waits_for_retries_within_the_horizon_and_counts_occurrences(
    cli, tmp_path, flaky_app
):
    name, sleep, slept = flaky_app
    _enqueue_flaky(cli, "ok-after-3", "ok-after-2", "never")
    result = _until_idle(cli, tmp_path, name, sleep)
    assert result.code == 0, result.err
    summary = result.json
    # Three occurrences in six attempts: two succeeded after their retries a second later,
    # one waits for a retry ten minutes away (beyond the 60 s horizon).
    assert summary["statuses"] == {"succeeded": 2, "retry_wait": 1}
    assert (summary["occurrences"], summary["attempts"]) == (3, 6)
    assert summary["attemptStatuses"] == {"retry_wait": 4, "succeeded": 2}
    assert summary["outcome"] == "idle"
    left = summary["left"]
    assert (left["waiting"], left["running"], left["nextStatus"]) == (1, 0, "retry_wait")
    assert left["complete"] is True
    assert "waiting for a retry due at" in result.err
    assert sum(slept) >= 2  # two rounds of one-second retries, waited on the app's clock
    with cli.open() as store:
        counts = {c.status: c.count for c in store.count_occurrences()}
        assert counts == {"succeeded": 2, "retry_wait": 1}
        [waiting] = store.list_occurrences(status="retry_wait", limit=5).items
        assert left["nextOccurrenceId"] == waiting.id
        assert left["nextDueAt"] == iso_utc(waiting.available_at)


def test_until_idle_says_what_is_left_and_when_the_next_is_due(cli, tmp_path, flaky_app):
    name, sleep, slept = flaky_app
    _enqueue_flaky(cli, "ok-after-2", "ok-after-3")
    result = cli(
        "worker",
        f"{name}:app",
        "--app-dir",
        str(tmp_path),
        "--until-idle",
        "--no-planner",
        "--poll-interval",
        "20ms",
        "--idle-horizon",
        "0s",
        sleep=sleep,
    )
    assert result.code == 0, result.err
    assert slept == []  # a zero horizon waits for nothing
    assert result.out.startswith(
        "worker stopped: 2 occurrence(s) (2 retry_wait) in 2 attempt(s); "
        "2 occurrence(s) wait: next, a retry due at 2026-01-01T00:00:01"
    )
    assert "(in 1s)" in result.out


def test_until_idle_runs_delayed_work_within_the_horizon_only(cli, tmp_path, flaky_app):
    name, sleep, slept = flaky_app
    from jobledger.testing import DEFAULT_START_MS

    _enqueue_flaky(cli, "ok-after-1", available_at=DEFAULT_START_MS + 30_000)
    _enqueue_flaky(cli, "ok-after-1", available_at=DEFAULT_START_MS + 120_000)
    result = _until_idle(cli, tmp_path, name, sleep, "--idle-horizon", "45s")
    assert result.code == 0, result.err
    summary = result.json
    assert summary["statuses"] == {"succeeded": 1}
    left = summary["left"]
    assert (left["waiting"], left["nextStatus"]) == (1, "queued")
    assert left["nextDueAt"] == iso_utc(DEFAULT_START_MS + 120_000)
    assert "waiting for a delayed occurrence due at" in result.err
    assert 29 <= sum(slept) <= 31


def test_idle_horizon_needs_until_idle_and_at_most_a_day(sqlite_cli, tmp_path, app_module):
    name = app_module(sqlite_cli.target)
    argv = ("worker", f"{name}:app", "--app-dir", str(tmp_path))
    result = sqlite_cli(*argv, "--idle-horizon", "1m", db=None)
    result.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    assert "--until-idle" in result.err
    with sqlite_cli.open() as store:
        store.create_job(id="e", kind="echo", authority=AUTHORITY)
        store.enqueue_occurrence(job_id="e", scheduled_for=0, trigger_key="t")
    too_long = sqlite_cli(*argv, "--until-idle", "--idle-horizon", "2d", db=None)
    too_long.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    with sqlite_cli.open() as store:  # refused before anything ran
        assert {c.status for c in store.count_occurrences()} == {"queued"}


def test_a_django_app_module_may_use_models_at_import(tmp_path: Path) -> None:
    """`jobledger worker` calls django.setup() before importing the app (DJANGO_SETTINGS_MODULE)."""
    import os
    import subprocess

    pytest.importorskip("django")
    (tmp_path / "site_settings.py").write_text(
        textwrap.dedent(
            """
            SECRET_KEY = "x"
            INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth"]
            DATABASES = {}
            USE_TZ = True
            """
        )
    )
    db = tmp_path / "jobs.sqlite3"
    (tmp_path / "site_jobs.py").write_text(
        textwrap.dedent(
            f"""
            from django.contrib.auth.models import User  # needs loaded apps
            import jobledger
            app = jobledger.App({str(db)!r}, authorize=jobledger.allow_all)
            """
        )
    )
    code = (
        "from jobledger.cli.worker import load_app; "
        f"print(type(load_app('site_jobs:app', {str(tmp_path)!r})).__name__)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "site_settings", "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "App"


def test_a_worker_whose_every_slot_is_stuck_exits_non_zero(sqlite_cli, tmp_path, app_module):
    """Real time, but short: a 20 ms time limit, a 50 ms stuck grace; the hung handler (deaf to
    cancellation) ends by itself a few seconds later in its daemon thread."""
    name = app_module(
        sqlite_cli.target,
        """
        import threading
        from datetime import timedelta

        @app.handler("hang", timeout=timedelta(milliseconds=20))
        def hang(ctx):
            threading.Event().wait(3)
    """,
    )
    with sqlite_cli.open() as store:
        store.create_job(id="h", kind="hang", authority=AUTHORITY)
        store.enqueue_occurrence(job_id="h", scheduled_for=0, trigger_key="t")
    result = sqlite_cli(
        "--json",
        "worker",
        f"{name}:app",
        "--app-dir",
        str(tmp_path),
        "--no-planner",
        "--stuck-grace",
        "50ms",
        db=None,
    )
    assert result.code == 75, result.err
    assert result.json["gaveUpStuck"] is True
    assert "stuck past stuck_grace" in result.err
    with sqlite_cli.open() as store:
        [occurrence] = store.list_occurrences().items
        assert (occurrence.status, occurrence.lease_owner) == ("retry_wait", None)
        assert occurrence.last_error["code"] == "SCHEDULER_RUNTIME_TIMEOUT"
        assert store.list_workers() == []


def test_an_isolated_handler_of_an_app_module_runs_in_a_child(sqlite_cli, tmp_path, app_module):
    """The child imports the handler from the app's module (found through --app-dir)."""
    name = app_module(
        sqlite_cli.target,
        """
        @app.handler("iso", isolation="process")
        def iso(ctx):
            return {"pid": os.getpid(), "isolated": ctx.isolated, "n": ctx.payload["n"]}
    """,
    )
    with sqlite_cli.open() as store:
        store.create_job(id="i", kind="iso", authority=AUTHORITY, payload={"n": 3})
        store.enqueue_occurrence(job_id="i", scheduled_for=0, trigger_key="t")
    result = sqlite_cli(
        "--json", "worker", f"{name}:app", "--app-dir", str(tmp_path), "--until-idle", db=None
    )
    assert result.code == 0, result.err
    assert result.json["statuses"] == {"succeeded": 1}
    with sqlite_cli.open() as store:
        [occurrence] = store.list_occurrences().items
        assert occurrence.result["isolated"] is True and occurrence.result["n"] == 3
        assert occurrence.result["pid"] != os.getpid()
