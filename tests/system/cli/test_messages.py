"""Refusals name the thing they are about, in the command's words: its options (not the
library's argument names), its units (not epoch ms), its commands (not ``migrate=True``), and
where the store path came from. Each case is one bad command line, as an operator would type it.
"""

from __future__ import annotations

import pytest

from jobledger.cli import web
from jobledger.store.migrations import LATEST_VERSION
from tests.store.sqlite.handmade import make_v2
from tests.system.cli.conftest import AUTHORITY, Cli
from tests.system.cli.docs_sync import command_helps

API_WORDS = ("migrate=True", "read_only=True", "login_link", "253370764799999", "identifier")


def _refused(result, code, exit_code, *expected):
    result.assert_one_line_error(code, exit_code)
    for text in expected:
        assert text in result.err, result.err
    for word in API_WORDS:
        assert word not in result.err, result.err
    return result


@pytest.fixture
def job(cli):
    with cli.open() as store:
        store.create_job(id="j", kind="k", authority=AUTHORITY)
        return store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t").id


# -- schedules: the options and human durations -------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("--every", "500ms"), "argument --every: must be at least 1s, not 500ms"),
        (("--every", "0s"), "argument --every: must be at least 1s, not 0ms"),
        (("--every", "10s", "--jitter", "3d"), "argument --jitter: must be at most 1d, not 3d"),
        (
            ("--every", "10s", "--catch-up-limit", "0"),
            "argument --catch-up-limit: must be from 1 to 10,000, not 0",
        ),
        (("--cron", "61 * * * *"), "--cron: minute value 61 is out of range 0-59"),
        (("--cron", "* * * * *", "--timezone", "Mars/Base"), "--timezone: 'Mars/Base' is not"),
        (("--max-attempts", "99"), "argument --max-attempts: must be from 1 to 32, not 99"),
    ],
)
def test_schedule_options_are_refused_by_their_names(cli, argv, expected):
    _refused(
        cli("job", "add", "s", "--kind", "k", *argv), "SCHEDULER_INVALID_ARGUMENT", 2, expected
    )


# -- values passed on to the store: the option they came from -----------------------------------


def test_names_and_texts_are_refused_by_their_options(cli, job):
    deep = "[" * 70 + "]" * 70
    for argv, expected in [
        (("job", "add", "s", "--kind", ""), "argument --kind: not a valid name: ''"),
        (("job", "add", "", "--kind", "k"), "argument JOB: not a valid name: ''"),
        (("job", "show", "x\x01"), "argument JOB: not a valid name"),
        (("job", "add", "s", "--kind", "k", "--workspace", " "), "--workspace is not valid"),
        (("job", "add", "s", "--kind", "k", "--tenant", "a\x01"), "--tenant is not valid"),
        (("job", "add", "s", "--kind", "k", "--payload", deep), "--payload exceeds"),
        (("job", "update", "j", "--payload", deep), "--payload exceeds"),
        (("enqueue", "j", "--payload", deep), "--payload exceeds"),
        (("enqueue", "j", "--count", "2", "--payload", deep), "--payload exceeds"),
        (("enqueue", "j", "--key", ""), "--key is not valid"),
        (("cancel", job, "--reason", "", "--yes"), "--reason is not valid"),
        (("history", "--type", ""), "--type is not valid"),
    ]:
        _refused(cli(*argv), "SCHEDULER_INVALID_ARGUMENT", 2, expected)


def test_requeueing_what_is_not_a_dead_letter_says_so(cli, job):
    _refused(
        cli("dead-letter", "requeue", job[:12], "--reason", "r"),
        "SCHEDULER_REQUEUE_EVIDENCE_CONFLICT",
        4,
        f"{job} is queued, not a dead letter",
    )


# -- limits: every list refuses what it cannot show, naming its range ---------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("occurrence", "list", "--limit", "5000"), "must be from 1 to 1,000, not 5,000"),
        (("history", "--limit", "5000"), "must be from 1 to 1,000, not 5,000"),
        (("audit", "--limit", "0"), "must be from 1 to 1,000, not 0"),
        (("job", "list", "--limit", "1001"), "must be from 1 to 1,000, not 1,001"),
        (("dead-letter", "list", "--limit", "500"), "must be from 1 to 200, not 500"),
        (("explain", "j", "--count", "101"), "must be from 1 to 100, not 101"),
        (("enqueue", "j", "--count", "10001"), "must be from 1 to 10,000, not 10,001"),
        (("db", "prune", "--older-than", "1d", "--batch-size", "9999"), "from 1 to 5,000"),
        (("history", "--follow", "--interval", "10ms"), "must be at least 50ms, not 10ms"),
        (("stats", "--window", "30d"), "argument --window: must be at most 7d, not 30d"),
        (("stats", "--window", "0s"), "argument --window: must be at least 1m, not 0ms"),
    ],
)
def test_limits_are_refused_with_their_range(cli, job, argv, expected):
    def interrupt(seconds):  # a --follow that was not refused stops at its first wait
        raise KeyboardInterrupt

    result = _refused(cli(*argv, sleep=interrupt), "SCHEDULER_INVALID_ARGUMENT", 2, expected)
    assert "argument --" in result.err


def test_every_list_documents_its_range():
    helps = command_helps()
    for command, text in [
        ("jobledger occurrence list", "1..1000"),
        ("jobledger history", "1..1000"),
        ("jobledger audit", "1..1000"),
        ("jobledger job list", "1..1000"),
        ("jobledger dead-letter list", "1..200"),
    ]:
        assert "--limit N" in helps[command] and text in helps[command], command
    assert "occurrence list --status dead_letter" in helps["jobledger dead-letter list"]


def test_a_full_dead_letter_page_says_where_the_rest_are(cli):
    from tests.system.cli.conftest import make_dead_letter

    with cli.open() as store:
        store.create_job(id="d", kind="k", authority=AUTHORITY, max_attempts=1)
        for n in range(2):
            make_dead_letter(store, "d", f"t{n}")
    result = cli.ok("dead-letter", "list", "--limit", "2", "--job", "d")
    assert "more may exist: jobledger occurrence list --status dead_letter --job d" in result.err
    assert "more may exist" not in cli.ok("dead-letter", "list", "--limit", "3").err


def test_stats_says_the_window_it_used(cli):
    assert "throughput over the last 7d" in cli.ok("stats", "--window", "7d").out
    assert "throughput over the last 1m" in cli.ok("stats", "--window", "1m").out


# -- the store: the command to run, and where its path came from --------------------------------


def test_an_empty_database_file_says_db_init(tmp_path, clean_env):
    target = tmp_path / "db" / "empty.sqlite3"
    target.parent.mkdir(mode=0o700)
    target.touch(mode=0o600)
    result = Cli(str(target), clean_env)("job", "list")
    _refused(
        result,
        "SCHEDULER_MIGRATION_REQUIRED",
        5,
        f"The store at {target} (the path given by --db) is an empty database",
        "hint: create jobledger's tables in it with `jobledger db init`",
    )


def test_an_old_store_says_db_migrate(tmp_path, clean_env):
    target = tmp_path / "db" / "v2.sqlite3"
    make_v2(target)
    _refused(
        Cli(str(target), clean_env)("stats"),
        "SCHEDULER_MIGRATION_REQUIRED",
        5,
        f"is at schema v2; this jobledger needs v{LATEST_VERSION}",
        "hint: run `jobledger db migrate`",
    )


@pytest.mark.skipif(not web.available(), reason="needs the web extra")
def test_web_names_its_store_argument_not_db(tmp_path, clean_env):
    missing = tmp_path / "typo" / "jobs.sqlite3"
    result = Cli(None, clean_env)("web", str(missing))
    _refused(
        result,
        "SCHEDULER_STORE_NOT_FOUND",
        5,
        f"No scheduler database exists at {missing} (the STORE given to `jobledger web`)",
        "hint: check the STORE path given to `jobledger web`",
    )
    assert "no --db was given" not in result.err


@pytest.mark.skipif(not web.available(), reason="needs the web extra")
def test_web_on_an_open_address_names_the_options(sqlite_cli):
    result = sqlite_cli("web", "--host", "0.0.0.0")  # noqa: S104 — refused before it listens
    _refused(
        result,
        "SCHEDULER_INVALID_ARGUMENT",
        2,
        "--token-file",
        "--basic-auth-file",
        "--read-only",
        "--host 127.0.0.1",
    )


def test_a_prune_with_nothing_to_prune_says_so_and_records_nothing(cli):
    result = cli.ok("db", "prune", "--older-than", "1d", "--yes")
    assert "nothing to prune" in result.out and "no audit record was written" in result.out
    assert "recorded in the audit log" not in result.out
    assert cli.json("audit")["records"] == []
