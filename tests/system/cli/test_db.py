"""`jobledger db …`, and the rule that only `db init` / `db migrate` create or upgrade a store:
every other command leaves a missing path missing and an old schema unmigrated."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import jobledger
from jobledger.store.migrations import LATEST_VERSION
from jobledger.store.postgres.connection import redact_url
from jobledger.testing import FakeClock
from tests.store.sqlite.handmade import listing, make_v2, tamper
from tests.system.cli.conftest import AUTHORITY, Cli, TtyInput

OLD = 1_700_000_000_000  # 2023-11-14: long ago, for prune

# Every command that reads or acts on an existing store, with arguments that would work.
STORE_COMMANDS = [
    ("db", "info"),
    ("db", "verify"),
    ("db", "prune", "--older-than", "30d", "--yes"),
    ("job", "list"),
    ("job", "show", "j"),
    ("job", "add", "j", "--kind", "k"),
    ("job", "update", "j", "--kind", "k2"),
    ("job", "enable", "j"),
    ("job", "disable", "j"),
    ("job", "remove", "j", "--reason", "r", "--yes"),
    ("enqueue", "j"),
    ("occurrence", "list"),
    ("occurrence", "show", "occ_00"),
    ("cancel", "occ_00", "--reason", "r", "--yes"),
    ("dead-letter", "list"),
    ("dead-letter", "requeue", "occ_00", "--reason", "r"),
    ("dead-letter", "requeue", "--all", "--reason", "r", "--yes"),
    ("history",),
    ("audit",),
    ("explain", "j"),
    ("plan",),
    ("stats",),
]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- init, info, migrate -----------------------------------------------------------------------


def test_init_creates_a_missing_sqlite_store_once(tmp_path, clean_env):
    target = tmp_path / "new" / "jobs.sqlite3"
    cli = Cli(str(target), clean_env)
    first = cli.json("db", "init")
    assert first["created"] is True
    assert first["schemaVersion"] == first["latestVersion"] == LATEST_VERSION
    assert first["backend"] == "sqlite"
    assert first["target"] == str(target)
    assert target.exists()
    again = cli.json("db", "init")
    assert again["created"] is False
    assert cli.ok("db", "init").out.startswith("already exists: ")


def test_info_json_shape(cli):
    info = cli.json("db", "info")
    assert set(info) == {
        "target",
        "backend",
        "latestVersion",
        "applicationId",
        "schemaVersion",
        "migrations",
    }
    assert info["applicationId"] == 0x4343534B
    assert [m["version"] for m in info["migrations"]] == list(range(1, LATEST_VERSION + 1))
    assert set(info["migrations"][0]) == {"version", "name", "checksum", "appliedAt"}
    text = cli.ok("db", "info").out
    assert f"schema version: {LATEST_VERSION}" in text and "scheduler-kernel-v1" in text
    assert cli.json("db", "verify")["ok"] is True


@pytest.mark.postgres
def test_init_and_migrate_on_postgres_create_a_schema_only_when_asked(
    postgres_database_url, clean_env
):
    cli = Cli(postgres_database_url, clean_env)
    before = _pg_schemas(postgres_database_url)
    refused = cli("--pg-schema", "ops_new", "job", "list")
    refused.assert_one_line_error("SCHEDULER_MIGRATION_REQUIRED", 5)
    assert _pg_schemas(postgres_database_url) == before
    created = cli.json("--pg-schema", "ops_new", "db", "init")
    assert created["created"] is True and created["backend"] == "postgresql"
    assert "ops_new" in _pg_schemas(postgres_database_url)
    assert cli.json("--pg-schema", "ops_new", "db", "migrate")["upgraded"] is False
    assert cli.json("--pg-schema", "ops_new", "job", "list") == {"jobs": [], "nextAfter": None}


@pytest.mark.postgres
def test_web_serves_the_store_in_the_pg_schema_it_was_given(
    postgres_database_url, clean_env, monkeypatch
):
    from jobledger.cli import web

    if not web.available():
        pytest.skip("the web extra is not installed")
    cli = Cli(postgres_database_url, clean_env)
    cli.ok("--pg-schema", "ops_web", "db", "init")
    served: list[str] = []
    monkeypatch.setattr(
        "jobledger.web.server.serve", lambda target, **options: served.append(target.schema)
    )
    assert cli("--pg-schema", "ops_web", "web", "--port", "0").code == 0
    assert served == ["ops_web"]


def _pg_schemas(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT nspname FROM pg_namespace").fetchall()}


def test_pg_schema_is_refused_with_sqlite(sqlite_cli):
    result = sqlite_cli("--pg-schema", "x", "job", "list")
    result.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    assert "--pg-schema" in result.err


def test_migrate_creates_upgrades_and_reports(tmp_path, clean_env):
    target = tmp_path / "db" / "old.sqlite3"
    make_v2(target)
    cli = Cli(str(target), clean_env)
    result = cli("--json", "db", "migrate")
    assert result.code == 0, result.err
    document = result.json
    assert document["fromVersion"] == 2
    assert document["toVersion"] == LATEST_VERSION
    assert document["upgraded"] is True and document["created"] is False
    assert document["backup"] == str(target.with_name("old.sqlite3.v2.bak"))
    assert Path(document["backup"]).exists()
    assert f"upgrading schema v2 → v{LATEST_VERSION}" in result.err and "done in" in result.err
    # the upgraded store works and kept its rows
    assert "job-v1" in {job["id"] for job in cli.json("job", "list")["jobs"]}
    nothing = cli.json("db", "migrate")
    assert nothing["upgraded"] is False and nothing["fromVersion"] == LATEST_VERSION
    fresh = Cli(str(tmp_path / "other" / "new.sqlite3"), clean_env)
    made = fresh.json("db", "migrate")
    assert made["created"] is True and made["fromVersion"] is None


def test_init_refuses_to_upgrade_an_old_store(tmp_path, clean_env):
    target = tmp_path / "db" / "old.sqlite3"
    make_v2(target)
    digest = _sha(target)
    result = Cli(str(target), clean_env)("db", "init")
    result.assert_one_line_error("SCHEDULER_MIGRATION_REQUIRED", 5)
    assert "db migrate" in result.err
    assert _sha(target) == digest


def test_verify_passes_and_fails(tmp_path, clean_env):
    target = tmp_path / "db" / "jobs.sqlite3"
    with jobledger.open_store(target) as store:
        store.create_job(id="job-a", kind="k", authority=AUTHORITY)
    cli = Cli(str(target), clean_env)
    report = cli.json("db", "verify")
    assert report["ok"] is True and all(check["ok"] for check in report["checks"])
    tamper("""UPDATE jobs SET authority_json = '{"schemaVersion":2}' WHERE job_id = 'job-a';""")(
        target
    )
    failed = cli("--json", "db", "verify")
    assert failed.code == 1
    assert failed.json["ok"] is False
    failed.assert_one_line_error("SCHEDULER_VERIFY_FAILED", 1)


# -- unsafe paths: refused, with nothing changed --------------------------------------------------


@pytest.mark.parametrize("command", [("db", "info"), ("db", "migrate"), ("db", "init")])
def test_a_file_in_a_shared_directory_is_refused_with_a_hint(command, tmp_path, clean_env):
    """`mkdir -m 1777 shared && echo hi > shared/notes.txt && jobledger --db shared/notes.txt
    db info` used to leave shared/ 0700 and notes.txt 0600 (then fail SCHEMA_CORRUPT)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    notes = shared / "notes.txt"
    notes.write_text("hi\n")
    notes.chmod(0o644)
    shared.chmod(0o1777)
    result = Cli(str(notes), clean_env)(*command)
    assert result.code == 5, result.err
    assert len(result.error_lines) == 1, result.err
    assert result.error_lines[0].startswith("error: SCHEDULER_UNSAFE_PATH: "), result.err
    assert "hint: others can create or replace files next to the database" in result.err
    assert (shared.stat().st_mode & 0o7777, notes.stat().st_mode & 0o7777) == (0o1777, 0o644)
    assert notes.read_text() == "hi\n"
    assert [p.name for p in shared.iterdir()] == ["notes.txt"]


def test_a_new_store_directly_in_a_sticky_directory_is_refused(tmp_path, clean_env):
    drop_box = tmp_path / "drop"
    drop_box.mkdir()
    drop_box.chmod(0o1777)
    result = Cli(str(drop_box / "jobs.sqlite3"), clean_env)("db", "init")
    result.assert_one_line_error("SCHEDULER_UNSAFE_PATH", 5)
    assert "private directory of its own" in result.err
    assert list(drop_box.iterdir()) == []
    made = Cli(str(drop_box / "jobledger" / "jobs.sqlite3"), clean_env).json("db", "init")
    assert made["created"] is True
    assert (drop_box / "jobledger").stat().st_mode & 0o7777 == 0o700


# -- read commands never create or upgrade ----------------------------------------------------


@pytest.mark.parametrize("argv", STORE_COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_a_missing_sqlite_path_stays_missing(argv, tmp_path, clean_env):
    parent = tmp_path / "typo"
    target = parent / "jobs.sqlite3"
    result = Cli(str(target), clean_env)(*argv)
    result.assert_one_line_error("SCHEDULER_STORE_NOT_FOUND", 5)
    assert "jobledger db init" in result.err
    assert not parent.exists()


@pytest.mark.parametrize("argv", STORE_COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_an_old_schema_stays_unmigrated(argv, tmp_path, clean_env):
    target = tmp_path / "db" / "v2.sqlite3"
    make_v2(target)
    digest, files = _sha(target), listing(target.parent)
    result = Cli(str(target), clean_env)(*argv)
    result.assert_one_line_error("SCHEDULER_MIGRATION_REQUIRED", 5)
    assert "hint: run `jobledger db migrate`" in result.err
    assert _sha(target) == digest
    assert listing(target.parent) == files  # no backup, no sidecar left behind


def _pg_old_schema(url: str, schema: str, version: int) -> None:
    """A schema at ``version`` made by hand from the DDL files (as an older jobledger left it)."""
    from jobledger.store.postgres import schema as pg_schema

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        with admin.transaction():
            admin.execute(f"SET LOCAL search_path TO {schema}")
            for migration in pg_schema.MIGRATIONS[:version]:
                admin.execute(migration.ddl)
                admin.execute(
                    "INSERT INTO migrations VALUES (%s, %s, %s, %s)",
                    (migration.version, migration.name, migration.checksum, OLD),
                )


def _pg_snapshot(url: str, schema: str) -> tuple[str, list[dict[str, object]]]:
    from psycopg.rows import dict_row

    from jobledger.store.postgres import schema as pg_schema

    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as admin:
        fingerprint = pg_schema.catalog_fingerprint(admin, schema)
        rows = admin.execute(f"SELECT * FROM {schema}.migrations ORDER BY version").fetchall()
    return fingerprint, rows


@pytest.mark.postgres
def test_an_old_postgres_schema_stays_unmigrated(postgres_database_url, clean_env):
    _pg_old_schema(postgres_database_url, "ops_v2", 2)
    before = _pg_snapshot(postgres_database_url, "ops_v2")
    cli = Cli(postgres_database_url, clean_env)
    for argv in (("job", "list"), ("stats",), ("history",), ("enqueue", "j"), ("db", "info")):
        result = cli("--pg-schema", "ops_v2", *argv)
        result.assert_one_line_error("SCHEDULER_MIGRATION_REQUIRED", 5)
    assert _pg_snapshot(postgres_database_url, "ops_v2") == before
    upgraded = cli.json("--pg-schema", "ops_v2", "db", "migrate")
    assert (upgraded["fromVersion"], upgraded["toVersion"]) == (2, LATEST_VERSION)
    assert upgraded["backup"] is None
    assert cli.json("--pg-schema", "ops_v2", "job", "list")["jobs"] == []


@pytest.mark.postgres
@pytest.mark.parametrize("wrong", ["database", "role", "port"])
def test_a_wrong_postgres_url_is_a_misconfiguration_not_an_outage(wrong, clean_env):
    """A missing database or role, or a closed port, used to print STORAGE_UNAVAILABLE with
    the hint to repeat the command when the store is reachable."""
    from tests.store.pg_support import ADMIN_URL

    scheme, _, rest = ADMIN_URL.partition("://")
    user, _, location = rest.partition("@")
    host_port, _, database = location.partition("/")
    host, _, port = host_port.rpartition(":")
    if wrong == "database":
        database = "jobledger_no_such_db"
    elif wrong == "role":
        user = "jobledger_no_such_role"
    else:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = str(probe.getsockname()[1])
    url = f"{scheme}://{user}:pw-s3cret@{host}:{port}/{database}?password=pw-s3cret"
    result = Cli(url, clean_env)("db", "info")
    if wrong == "port":
        # Nothing listening may as well be a server restarting: a retryable outage that says
        # where it looked and both causes.
        result.assert_one_line_error("SCHEDULER_STORAGE_UNAVAILABLE", 5)
        assert "restarting" in result.err
    else:
        result.assert_one_line_error("SCHEDULER_STORE_MISCONFIGURED", 5)
        assert "hint: repeating the command will not help" in result.err
        assert "when the store is reachable" not in result.err
    assert "s3cret" not in result.err + result.out
    expected = {
        "database": 'has no database "jobledger_no_such_db"',
        "role": 'has no role "jobledger_no_such_role"',
        "port": f"Nothing accepts PostgreSQL connections at {host}:{port}",
    }[wrong]
    assert expected in result.err


def test_no_store_given_is_an_error_naming_the_default_store(tmp_path, clean_env):
    """Issue 32 item 10: with no --db, --app or $JOBLEDGER_DB the command line used the
    embedded default store (the demo's) without a word; it now stops and says how to name one,
    and the default store is used only when named."""
    cli = Cli(None, clean_env)
    expected = Path(clean_env["XDG_DATA_HOME"]) / "jobledger" / "jobledger.sqlite3"
    for argv in (("job", "list"), ("db", "init"), ("stats",)):
        missing = cli(*argv)
        missing.assert_one_line_error("SCHEDULER_STORE_NOT_CONFIGURED", 5)
        assert f"--db {expected}" in missing.err
        assert "--app" in missing.err
    assert not expected.exists()
    named = Cli(str(expected), clean_env)
    assert named.json("db", "init")["target"] == str(expected)
    assert named.json("job", "list") == {"jobs": [], "nextAfter": None}
    # Even once it exists, it is not used unless named.
    cli("job", "list").assert_one_line_error("SCHEDULER_STORE_NOT_CONFIGURED", 5)


def test_every_command_can_take_the_store_of_an_app(tmp_path, clean_env, monkeypatch):
    db = tmp_path / "shop.sqlite3"
    (tmp_path / "shop_jobs.py").write_text(
        "import jobledger\n"
        f"app = jobledger.App({str(db)!r}, name='shop', authorize=jobledger.allow_all)\n"
        "app.ensure_job('receipt', 'send_receipt')\n"
    )
    monkeypatch.chdir(tmp_path)
    cli = Cli(None, clean_env)
    listed = cli.json("--app", "shop_jobs:app", "job", "list")
    assert [job["id"] for job in listed["jobs"]] == ["receipt"]
    assert cli.ok("job", "list", "--app", "shop_jobs:app").code == 0  # after the command too
    both = cli("--app", "shop_jobs:app", "--db", str(db), "job", "list")
    both.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


@pytest.mark.parametrize("source", ["--db", "$JOBLEDGER_DB"])
def test_a_missing_store_names_its_path_and_where_it_came_from(source, tmp_path, clean_env):
    """`SCHEDULER_STORE_NOT_FOUND: No scheduler database exists at this path` named no path —
    worst for the default store, whose path the user never typed."""
    from jobledger.cli.context import Context

    path = tmp_path / "typo" / "jobs.sqlite3"
    env = {**clean_env, "JOBLEDGER_DB": str(path)} if source == "$JOBLEDGER_DB" else clean_env
    db = str(path) if source == "--db" else None
    result = Cli(db, env)("job", "list")
    result.assert_one_line_error("SCHEDULER_STORE_NOT_FOUND", 5)
    where = {
        "--db": "the path given by --db",
        "$JOBLEDGER_DB": "the path in $JOBLEDGER_DB",
    }[source]
    assert result.error_lines == [
        f"error: SCHEDULER_STORE_NOT_FOUND: No scheduler database exists at {path} ({where})"
    ]
    assert f"hint: check the path ({source})" in result.err
    assert not path.parent.exists()
    with pytest.raises(jobledger.StoreNotFound) as missing:
        Context(target=str(path), target_source=source).open_store()
    assert missing.value.details == {"target": str(path), "targetSource": source}


def test_jobledger_db_environment_variable_and_db_flag(tmp_path, clean_env):
    from_env = tmp_path / "env" / "jobs.sqlite3"
    env = {**clean_env, "JOBLEDGER_DB": str(from_env)}
    cli = Cli(None, env)
    assert cli.json("db", "init")["target"] == str(from_env)
    flag = tmp_path / "flag" / "jobs.sqlite3"
    # --db wins over the variable, and may follow the command
    assert cli.json("db", "init", "--db", f"sqlite:///{flag}")["target"] == str(flag)


# -- prune ---------------------------------------------------------------------------------------


def _settled_long_ago(target: str, count: int) -> None:
    options = {"listen": False} if target.startswith("postgresql") else {}
    with jobledger.open_store(target, clock=FakeClock(OLD), **options) as store:
        store.create_job(id="old", kind="k", authority=AUTHORITY)
        for n in range(count):
            store.enqueue_occurrence(job_id="old", scheduled_for=OLD, trigger_key=f"t{n}")
            claimed = store.claim_next(owner_id="w", lease_ms=60_000)
            store.settle(
                occurrence_id=claimed.id, owner_id="w", fence=claimed.fence, outcome="succeeded"
            )
        store.enqueue_occurrence(job_id="old", scheduled_for=OLD, trigger_key="still-queued")


def test_prune_asks_then_deletes_in_batches_and_audits(cli, db):
    _settled_long_ago(db, 5)
    refused = cli("db", "prune", "--older-than", "30d")
    refused.assert_one_line_error("SCHEDULER_CONFIRMATION_REQUIRED", 2)
    assert "hint: pass --yes" in refused.err
    declined = cli("db", "prune", "--older-than", "30d", stdin=TtyInput("n\n"))
    declined.assert_one_line_error("SCHEDULER_ABORTED", 1)
    assert "[y/N]" in declined.err
    with cli.open() as store:
        assert sum(c.count for c in store.count_occurrences()) == 6

    result = cli(
        "--actor",
        "ops:alice",
        "--json",
        "db",
        "prune",
        "--older-than",
        "30d",
        "--batch-size",
        "2",
        stdin=TtyInput("yes\n"),
    )
    assert result.code == 0, result.err
    document = result.json
    assert document["occurrences"] == 5
    assert document["batches"] == 3
    assert document["byStatus"] == {"succeeded": 5, "dead_letter": 0, "cancelled": 0}
    assert document["actor"] == "ops:alice"
    assert result.err.count("batch ") == 3  # progress per batch
    with cli.open() as store:
        left = store.list_occurrences(job_id="old").items
        assert [o.status for o in left] == ["queued"]  # live work is never pruned
        records = store.audit_log()
        assert {r.action for r in records} == {"pruned"}
        assert {r.actor for r in records} == {"ops:alice"}
        assert sum(r.data["occurrences"] for r in records) == 5
    audit = cli.json("audit")
    assert [r["action"] for r in audit["records"]] == ["pruned"] * 3
    assert "pruned" in cli.ok("audit").out


def test_prune_keeps_recent_and_filters_by_status(cli, db):
    _settled_long_ago(db, 2)
    document = cli.json("db", "prune", "--older-than", "10000d", "--yes")
    assert document["occurrences"] == 0
    only_dead = cli.json("db", "prune", "--older-than", "1d", "--status", "dead_letter", "--yes")
    assert only_dead["occurrences"] == 0 and only_dead["byStatus"] == {"dead_letter": 0}
    bad = cli("db", "prune", "--older-than", "1d", "--status", "queued", "--yes")
    bad.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


# -- concurrent `db migrate`: each process reports what it did -----------------------------------

FIXTURES = Path("/work/shared/fixtures/reference-v1")
ROOT = Path(__file__).resolve().parents[3]
# A plain application open racing the commands: prints what its open did to the schema.
OPENER = """
import json, sys
import jobledger
store = jobledger.open_store(sys.argv[1], **json.loads(sys.argv[2]))
outcome = getattr(store, "schema_outcome", None)
print(json.dumps({"upgradedFrom": getattr(outcome, "upgraded_from", None),
                  "backup": None if getattr(outcome, "backup", None) is None
                  else str(outcome.backup)}))
store.close()
"""


def _start(argv: list[str], tmp_path: Path, name: str, env: dict[str, str]) -> subprocess.Popen:
    with (tmp_path / f"{name}.out").open("w") as out, (tmp_path / f"{name}.err").open("w") as err:
        return subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, stdout=out, stderr=err, env={**os.environ, **env}
        )


def _stop_leftovers(processes: dict[str, subprocess.Popen]) -> None:
    """After a failed wait: end the racers this test started, so none outlives it."""
    for process in processes.values():
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def _wait_for(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _finish(processes: dict[str, subprocess.Popen], tmp_path: Path) -> dict[str, tuple[str, str]]:
    outputs = {}
    for name, process in processes.items():
        assert process.wait(timeout=120) == 0, (tmp_path / f"{name}.err").read_text()
        outputs[name] = (
            (tmp_path / f"{name}.out").read_text(),
            (tmp_path / f"{name}.err").read_text(),
        )
    return outputs


def _check_reports(
    outputs: dict[str, tuple[str, str]], target: str, *, backups: bool = True
) -> str:
    """Exactly one process says it upgraded, and each command says what it did; returns the
    upgrader's name. ``backups``: the store keeps a file backup (SQLite; PostgreSQL takes none)."""
    text = outputs["text-cli"][0]
    document = json.loads(outputs["json-cli"][0])
    claims = {
        "text-cli": text.startswith(f"upgraded {target} from v1 to v{LATEST_VERSION}"),
        "json-cli": document["upgraded"] is True,
        "opener": json.loads(outputs["opener"][0])["upgradedFrom"] == 1,
    }
    upgraders = [name for name, claimed in claims.items() if claimed]
    assert len(upgraders) == 1, (upgraders, outputs)
    if not claims["text-cli"]:
        assert text.strip() == (
            f"{target} was already upgraded to v{LATEST_VERSION} by another process"
        ), text
    assert document["toVersion"] == LATEST_VERSION
    assert document["byAnotherProcess"] is not claims["json-cli"]
    if claims["json-cli"]:
        assert document["fromVersion"] == 1
        assert (document["backup"] is not None) is backups
    else:
        assert document["backup"] is None
    return upgraders[0]


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="reference fixtures not available")
def test_concurrent_migrates_of_a_v1_file_each_report_what_they_did(tmp_path, clean_env):
    """Two `db migrate` and one application open race on a v1 file. All three find v1 and take
    a backup before any can upgrade (the test holds the write lock until the three backups
    exist); one upgrades, the others find it done. Each command used to print "upgraded … from
    v1 to v<latest>", whoever did it, and the one that did print no backup line."""
    directory = tmp_path / "db"
    directory.mkdir(mode=0o700)
    target = directory / "lifecycle.sqlite"
    shutil.copyfile(FIXTURES / "lifecycle.sqlite", target)
    target.chmod(0o600)
    manifest = json.loads((FIXTURES / "lifecycle.manifest.json").read_text())
    holder = sqlite3.connect(target, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    processes: dict[str, subprocess.Popen] = {}
    try:
        processes = {
            "text-cli": _start(
                ["-m", "jobledger", "--db", str(target), "db", "migrate"],
                tmp_path,
                "text-cli",
                clean_env,
            ),
            "json-cli": _start(
                ["-m", "jobledger", "--db", str(target), "--json", "db", "migrate"],
                tmp_path,
                "json-cli",
                clean_env,
            ),
            "opener": _start(["-c", OPENER, str(target), "{}"], tmp_path, "opener", clean_env),
        }
        _wait_for(lambda: len(list(directory.glob("*.bak"))) == 3, "three backups")
    except BaseException:
        _stop_leftovers(processes)
        raise
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    outputs = _finish(processes, tmp_path)
    upgrader = _check_reports(outputs, str(target))
    backups = sorted(directory.glob("*.bak"))
    assert len(backups) == 1, backups  # the losers removed theirs
    for name in ("text-cli", "json-cli"):
        out = outputs[name][0]
        if name == upgrader:
            assert str(backups[0]) in out
        else:
            assert "backup" not in out.replace('"backup": null', "")
    if upgrader == "opener":
        assert json.loads(outputs["opener"][0])["backup"] == str(backups[0])
    with jobledger.open_store(target, migrate=False) as store:
        assert store.schema_info().schema_version == LATEST_VERSION
        assert [m.version for m in store.schema_info().migrations] == list(
            range(1, LATEST_VERSION + 1)
        )
    conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
    try:
        counts = {
            table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in ("jobs", "occurrences", "events")
        }
    finally:
        conn.close()
    expected = manifest["counts"]
    assert counts == {table: expected[table] for table in ("jobs", "occurrences", "events")}


@pytest.mark.postgres
def test_concurrent_migrates_of_a_v1_postgres_schema_each_report_what_they_did(
    postgres_database_url, tmp_path, clean_env
):
    """The same race on PostgreSQL: the test holds the schema's advisory lock until all three
    processes wait for it (so all three found v1); one upgrades, the others report it done."""
    from jobledger.store.postgres import schema as pg_schema

    _pg_old_schema(postgres_database_url, "racy", 1)
    with psycopg.connect(postgres_database_url, autocommit=True) as admin:
        admin.execute(
            "INSERT INTO racy.jobs VALUES ('j', 'k', '{}', 'null', %s, 1, 1, 3, 5, 5)",
            (jobledger.canonical_json(jobledger.normalize_authority(AUTHORITY)),),
        )
    pg = ["--db", postgres_database_url, "--pg-schema", "racy"]
    processes: dict[str, subprocess.Popen] = {}
    with psycopg.connect(postgres_database_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (pg_schema._lock_key("racy"),))
        processes = {
            "text-cli": _start(
                ["-m", "jobledger", *pg, "db", "migrate"], tmp_path, "text-cli", clean_env
            ),
            "json-cli": _start(
                ["-m", "jobledger", *pg, "--json", "db", "migrate"], tmp_path, "json-cli", clean_env
            ),
            "opener": _start(
                ["-c", OPENER, postgres_database_url, '{"schema": "racy", "listen": false}'],
                tmp_path,
                "opener",
                clean_env,
            ),
        }

        def waiting() -> int:
            with psycopg.connect(postgres_database_url, autocommit=True) as probe:
                row = probe.execute(
                    "SELECT COUNT(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE l.locktype = 'advisory' AND NOT l.granted "
                    "AND d.datname = current_database()"
                ).fetchone()
                return int(row[0]) if row else 0

        try:
            _wait_for(lambda: waiting() == 3, "three processes waiting for the upgrade lock")
        except BaseException:
            _stop_leftovers(processes)
            raise
        holder.rollback()
    outputs = _finish(processes, tmp_path)
    _check_reports(outputs, redact_url(postgres_database_url), backups=False)
    with psycopg.connect(postgres_database_url) as admin:
        history = admin.execute("SELECT version FROM racy.migrations ORDER BY version").fetchall()
        jobs = admin.execute("SELECT job_id FROM racy.jobs").fetchall()
    assert [row[0] for row in history] == list(range(1, LATEST_VERSION + 1))
    assert jobs == [("j",)]
