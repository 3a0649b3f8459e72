"""SQL injection through every identifier, JSON path, kind, workspace, schema name and payload.

Every value reaches SQL as a bound parameter: hostile strings that the identifier rules accept
round-trip exactly and match only themselves; the ones they refuse are refused, coded, with
nothing written; hostile PostgreSQL schema names are refused before any SQL is built; and the
schema is intact afterwards (every table still there, ``verify()`` ok).
"""

from __future__ import annotations

from typing import Any

import pytest

import jobledger
from jobledger.store.postgres.connection import validate_schema_name

HOSTILE = [
    "x'; DROP TABLE jobs; --",
    'x"; DROP TABLE occurrences; --',
    "x' OR '1'='1",
    "x') OR ('a'='a",
    "x%' --",
    "$.principal.id",
    "$[0]",
    "x\\'; SELECT pg_sleep(5); --",
    "x;DELETE FROM events",
    "x/**/OR/**/1=1",
    "%s",
    "%(owner_id)s",
    ":now",
    "?",
    "x\u2028y",
    "é's",
]


def _try(call: Any) -> tuple[bool, Any]:
    try:
        return True, call()
    except jobledger.SchedulerError as exc:
        error = exc
    assert error.code.startswith("SCHEDULER_")
    return False, error


def _authority(workspace: str | None = None, principal: str = "alice") -> dict[str, Any]:
    authority: dict[str, Any] = {"principal": {"type": "user", "id": principal}}
    if workspace is not None:
        authority["workspaceId"] = workspace
    return authority


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_identifiers_round_trip_or_are_refused(store, hostile):
    store.create_job(id="plain", kind="work", authority=_authority())
    accepted = {}
    for field, call in {
        "job_id": lambda: store.create_job(id=hostile, kind="work", authority=_authority()),
        "kind": lambda: store.create_job(id="k-job", kind=hostile, authority=_authority()),
        "principal": lambda: store.create_job(
            id="p-job", kind="work", authority=_authority(principal=hostile)
        ),
        "workspace": lambda: store.create_job(
            id="w-job", kind="work", authority=_authority(workspace=hostile)
        ),
    }.items():
        ok, value = _try(call)
        accepted[field] = ok
        if ok:
            assert isinstance(value, jobledger.Job)
    if accepted["job_id"]:
        job = store.get_job(hostile)
        assert job is not None and job.id == hostile.strip()
    if accepted["kind"]:
        assert store.get_job("k-job").kind == hostile.strip()
    if accepted["principal"]:
        assert store.get_job("p-job").authority["principal"]["id"] == hostile
    # Occurrences with hostile trigger keys, owners, reasons and actors.
    occurrence = store.enqueue_occurrence(job_id="plain", scheduled_for=0, trigger_key="t1")
    ok, hostile_occurrence = _try(
        lambda: store.enqueue_occurrence(job_id="plain", scheduled_for=0, trigger_key=hostile)
    )
    if ok:
        assert store.get_occurrence(hostile_occurrence.id).trigger_key == hostile.strip()
    ok, claimed = _try(lambda: store.claim_next(owner_id=hostile, lease_ms=60_000))
    if ok and claimed is not None:
        assert claimed.lease_owner == hostile.strip()
        ok, _ = _try(
            lambda: store.release_lease(
                occurrence_id=claimed.id, owner_id=hostile, fence=claimed.fence, reason=hostile
            )
        )
    _try(
        lambda: store.cancel_occurrence(occurrence_id=occurrence.id, actor=hostile, reason=hostile)
    )
    # Reads with hostile filters match nothing (and certainly not everything).
    for read in (
        lambda: store.get_job(hostile + "-missing"),
        lambda: store.get_occurrence(hostile),
        lambda: store.list_occurrences(job_id=hostile + "-missing"),
        lambda: store.list_occurrences(kind=hostile + "-missing"),
        lambda: store.history(job_id=hostile + "-missing"),
        lambda: store.events(event_type=hostile),
        lambda: store.list_dead_letters(job_id=hostile + "-missing"),
        lambda: store.list_occurrences_by_trigger(job_id="plain", trigger_key=hostile + "-x"),
    ):
        ok, value = _try(read)
        if ok:
            assert value in (None, []) or tuple(getattr(value, "items", ())) == ()
    ok, none = _try(lambda: store.claim_next(owner_id="w", lease_ms=1000, workspace_id=hostile))
    if ok and none is not None:
        assert none.authority.get("workspaceId") == hostile
    # Everything is still there and sound.
    assert store.get_job("plain") is not None
    assert store.verify().ok


@pytest.mark.parametrize(
    "payload",
    [
        {"sql": "'); DROP TABLE jobs; --", "path": "$.a[0]", "q": '"\\"'},
        {"$.authority": {"principal": {"type": "admin", "id": "root"}}},
        ["x' OR 1=1", {"nested": {"deeper": "'; --"}}],
        {"unicode": "é\u2028\u2029\U0001f984", "keys": {"10": 1, "2": 2}},
        "a plain 'string' with \"quotes\"",
    ],
)
def test_hostile_payloads_round_trip_exactly(store, payload):
    job = store.create_job(id="j", kind="work", authority=_authority(), payload=payload)
    assert store.get_job("j").payload == payload == job.payload
    occurrence = store.enqueue_occurrence(
        job_id="j", scheduled_for=0, trigger_key="t", payload=payload
    )
    assert store.get_occurrence(occurrence.id).payload == payload
    claimed = store.claim_next(owner_id="w", lease_ms=60_000)
    assert claimed is not None
    assert claimed.authority["principal"] == _authority()["principal"]  # not the payload's
    settled = store.settle(
        occurrence_id=claimed.id,
        owner_id="w",
        fence=claimed.fence,
        outcome="succeeded",
        result=payload,
    )
    assert store.get_occurrence(settled.id).result == payload
    assert store.verify().ok


HOSTILE_SCHEMAS = [
    'jobledger"; DROP SCHEMA public CASCADE; --',
    "jobledger; DROP TABLE x",
    "Jobledger",
    "job ledger",
    "public",
    "pg_catalog",
    "pg_temp",
    "information_schema",
    "select",
    "a" * 49,
    "",
    "1abc",
    "jobledger\x00",
    "jöbledger",
]


@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS)
def test_hostile_schema_names_are_refused_before_any_sql(schema):
    with pytest.raises(jobledger.InvalidArgument):
        validate_schema_name(schema)


@pytest.mark.postgres
@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS[:4])
def test_hostile_schema_names_are_refused_by_open_store(postgres_database_url, schema):
    import psycopg

    with pytest.raises(jobledger.InvalidArgument):
        jobledger.open_store(postgres_database_url, schema=schema, listen=False)
    with psycopg.connect(postgres_database_url) as conn:
        schemas = {row[0] for row in conn.execute("SELECT nspname FROM pg_namespace")}
    assert "public" in schemas and not any("DROP" in name for name in schemas)


# -- text that is not Unicode ---------------------------------------------------------------------

# A lone surrogate is how Python holds an invalid byte it decoded with surrogateescape (argv,
# file names, environment: b"\xff" -> "\udcff"), and what a careless UTF-16 slice leaves behind.
NOT_UNICODE = [
    b"bad\xffid".decode("utf-8", "surrogateescape"),
    "lone\ud800high",
    "\udfff",
    "low-then-high\ude00\ud83d",
]


def _stored(store: jobledger.Store) -> tuple[object, ...]:
    """Everything a refused call could have written, read back through the protocol."""
    return (
        store.list_jobs(limit=1000),
        store.count_occurrences(),
        store.list_occurrences(limit=1000).items,
        store.events(limit=1000),
        store.audit_log(limit=1000),
        store.list_workers(stopped_since=0),
        store.lease_holders(),
    )


def _text_calls(store: jobledger.Store, bad: str, claimed: jobledger.Occurrence) -> dict[str, Any]:
    """Every door a caller's text reaches the store through, with ``bad`` in one argument."""
    holder = {"occurrence_id": claimed.id, "owner_id": "w", "fence": claimed.fence}
    return {
        "get_job": lambda: store.get_job(bad),
        "get_occurrence": lambda: store.get_occurrence(bad),
        "create_job id": lambda: store.create_job(id=bad, kind="work", authority=_authority()),
        "create_job kind": lambda: store.create_job(id="n", kind=bad, authority=_authority()),
        "create_job principal": lambda: store.create_job(
            id="n", kind="work", authority=_authority(principal=bad)
        ),
        "create_job workspace": lambda: store.create_job(
            id="n", kind="work", authority=_authority(workspace=bad)
        ),
        "create_job payload": lambda: store.create_job(
            id="n", kind="work", authority=_authority(), payload={"text": bad}
        ),
        "create_job payload key": lambda: store.create_job(
            id="n", kind="work", authority=_authority(), payload={bad: 1}
        ),
        "create_job trigger": lambda: store.create_job(
            id="n", kind="work", authority=_authority(), trigger={"note": [bad]}
        ),
        "create_job actor": lambda: store.create_job(
            id="n", kind="work", authority=_authority(), actor=bad
        ),
        "update_job payload": lambda: store.update_job(
            "plain", expected_revision=1, patch={"payload": [bad]}
        ),
        "update_job actor": lambda: store.update_job(
            "plain", expected_revision=1, patch={"enabled": False}, actor=bad
        ),
        "enqueue trigger_key": lambda: store.enqueue_occurrence(
            job_id="plain", scheduled_for=0, trigger_key=bad
        ),
        "enqueue payload": lambda: store.enqueue_occurrence(
            job_id="plain", scheduled_for=0, trigger_key="t2", payload={"p": bad}
        ),
        "enqueue_batch": lambda: store.enqueue_batch(
            [
                jobledger.EnqueueRequest(job_id="plain", scheduled_for=0, trigger_key="t3"),
                jobledger.EnqueueRequest(job_id="plain", scheduled_for=0, trigger_key=bad),
            ]
        ),
        "claim_next owner": lambda: store.claim_next(owner_id=bad, lease_ms=60_000),
        "claim_next kind": lambda: store.claim_next(owner_id="w2", lease_ms=1000, job_kind=bad),
        "claim_batch workspace": lambda: store.claim_batch(
            owner_id="w2", lease_ms=1000, limit=5, workspace_id=bad
        ),
        "claim_occurrence owner": lambda: store.claim_occurrence(
            occurrence_id=claimed.id, owner_id=bad, lease_ms=60_000
        ),
        "renew owner": lambda: store.renew(**{**holder, "owner_id": bad}, lease_ms=60_000),
        "settle result": lambda: store.settle(**holder, outcome="succeeded", result={"r": bad}),
        "settle error": lambda: store.settle(**holder, outcome="failed", error={"message": bad}),
        "release_lease reason": lambda: store.release_lease(**holder, reason=bad),
        "cancel reason": lambda: store.cancel_occurrence(
            occurrence_id=claimed.id, actor="ops", reason=bad
        ),
        "cancel actor": lambda: store.cancel_occurrence(
            occurrence_id=claimed.id, actor=bad, reason="r"
        ),
        "list_occurrences kind": lambda: store.list_occurrences(kind=bad),
        "list_occurrences job": lambda: store.list_occurrences(job_id=bad),
        "list_occurrences_by_trigger": lambda: store.list_occurrences_by_trigger(
            job_id="plain", trigger_key=bad
        ),
        "history": lambda: store.history(job_id=bad),
        "events type": lambda: store.events(event_type=bad),
        "list_dead_letters": lambda: store.list_dead_letters(job_id=bad),
        "owner_gone": lambda: store.owner_gone(bad),
        "expire_leases_of": lambda: store.expire_leases_of(bad, reason="owner_gone"),
        "register_worker id": lambda: store.register_worker(
            worker_id=bad, hostname="h", pid=1, info={}
        ),
        "register_worker hostname": lambda: store.register_worker(
            worker_id="wk", hostname=bad, pid=1, info={}
        ),
        "register_worker info": lambda: store.register_worker(
            worker_id="wk", hostname="h", pid=1, info={"kinds": [bad]}
        ),
        "touch_worker": lambda: store.touch_worker(bad),
        "prune actor": lambda: store.prune(before=0, actor=bad),
    }


# JSON values take a lone surrogate as JSON.stringify does (written as its escape, SPEC §2
# "Text"): only raw text — identifiers, names, reasons — refuses it.
JSON_DOORS = {
    "create_job payload",
    "create_job payload key",
    "create_job trigger",
    "update_job payload",
    "enqueue payload",
    "settle result",
    "settle error",
    "register_worker info",
}


@pytest.mark.parametrize("bad", NOT_UNICODE, ids=["invalid-byte", "high", "low", "low-high"])
def test_text_that_is_not_unicode_is_refused_at_every_door_and_writes_nothing(store, bad):
    store.create_job(id="plain", kind="work", authority=_authority())
    store.enqueue_occurrence(job_id="plain", scheduled_for=0, trigger_key="t1")
    claimed = store.claim_next(owner_id="w", lease_ms=60_000)
    assert claimed is not None
    before = _stored(store)
    calls = _text_calls(store, bad, claimed)
    assert JSON_DOORS <= set(calls)
    for name, call in calls.items():
        if name in JSON_DOORS:
            continue
        with pytest.raises(jobledger.InvalidArgument) as refused:
            call()
        error = refused.value
        assert error.code == "SCHEDULER_INVALID_ARGUMENT", name
        assert "is not valid Unicode text" in error.message, (name, error.message)
        assert bad not in error.message, name  # the raw text is never echoed
        error.message.encode("utf-8")  # the message itself is valid text
        assert _stored(store) == before, f"{name} was refused but wrote something"
    assert store.verify().ok


@pytest.mark.parametrize("bad", NOT_UNICODE, ids=["invalid-byte", "high", "low", "low-high"])
def test_json_doors_keep_a_lone_surrogate_as_json_stringify_does(store, bad):
    store.create_job(id="plain", kind="work", authority=_authority())
    store.enqueue_occurrence(job_id="plain", scheduled_for=0, trigger_key="t1")
    claimed = store.claim_next(owner_id="w", lease_ms=60_000)
    assert claimed is not None
    # the pair a high surrogate may start in the text is joined, as ECMAScript reads it
    read = jobledger.contract.json_text(bad)
    calls = _text_calls(store, bad, claimed)
    for name in sorted(JSON_DOORS - {"settle error"}):
        calls[name]()
        if name.startswith("create_job"):
            store.remove_job("n", expected_revision=1, actor="ops", reason="again")
    occurrence = store.get_occurrence(claimed.id)
    assert occurrence is not None and occurrence.result == {"r": read}
    job = store.get_job("plain")
    assert job is not None and job.payload == [read]
    assert store.verify().ok


@pytest.mark.parametrize("bad", NOT_UNICODE[:1])
def test_app_doors_refuse_text_that_is_not_unicode(target, bad):
    with jobledger.App(target, authorize=jobledger.allow_all) as app:
        app.ensure_job("plain", "work")
        before = _stored(app.store)
        for call in (
            lambda: app.ensure_job(bad, "work"),
            lambda: app.schedule(bad, "work", cron="* * * * *"),
            lambda: app.enqueue("plain", key=bad),
            lambda: app.enqueue_many("plain", [{}, {}], keys=["a", bad]),
            lambda: app.explain(bad),
        ):
            with pytest.raises(jobledger.InvalidArgument, match="not valid Unicode text"):
                call()
            assert _stored(app.store) == before
        with pytest.raises(jobledger.InvalidArgument, match="not valid Unicode text"):
            jobledger.App(app.store, name=bad)
        with pytest.raises(jobledger.InvalidArgument, match="not valid Unicode text"):
            app.runtime(owner_id=bad)


def test_a_surrogate_pair_is_stored_as_the_character_it_spells(store):
    pair = "\ud83d\ude00"  # two code points in Python, one character in UTF-16 (and JS)
    job = store.create_job(id=f"j{pair}", kind="work", authority=_authority(), payload=[pair])
    assert job.id == "j\U0001f600" and job.payload == ["\U0001f600"]
    assert store.get_job(f"j{pair}") == store.get_job("j\U0001f600") == job
    same = store.enqueue_occurrence(job_id=job.id, scheduled_for=0, trigger_key=f"k{pair}")
    again = store.enqueue_occurrence(job_id=f"j{pair}", scheduled_for=0, trigger_key="k\U0001f600")
    assert again.id == same.id and again.deduplicated


def test_a_postgresql_url_that_is_not_unicode_is_refused_before_parsing():
    pytest.importorskip("psycopg")
    url = "postgresql://app:s3cr" + b"\xff".decode("utf-8", "surrogateescape") + "t@db.invalid/x"
    with pytest.raises(jobledger.InvalidArgument) as refused:
        jobledger.open_store(url)
    assert refused.value.details == {
        "field": "PostgreSQL URL",
        "codePoint": "U+DCFF",
        "byte": "0xff",
    }
    assert "s3cr" not in refused.value.message  # nothing of the URL, so no password either


# -- through the command line ---------------------------------------------------------------------

BAD_BYTE = b"\xff".decode("utf-8", "surrogateescape")  # how Python hands argv's 0xff to main()


def _cli(target: str, *argv: str) -> tuple[int, str]:
    import io

    from jobledger.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--db", target, *argv],
        env={},
        stdin=io.StringIO(""),
        stdout=out,
        stderr=err,
        sleep=lambda seconds: None,
    )
    return code, err.getvalue()


CLI_TEXT_ARGUMENTS = [
    (["job", "add", f"bad{BAD_BYTE}id", "--kind", "work"], "JOB"),
    (["job", "add", "new", "--kind", f"w{BAD_BYTE}"], "--kind"),
    (["job", "add", "new", "--kind", "work", "--principal", f"user:al{BAD_BYTE}"], "--principal"),
    (["job", "add", "new", "--kind", "work", "--workspace", BAD_BYTE], "--workspace"),
    (["job", "show", f"plain{BAD_BYTE}"], "JOB"),
    (["job", "disable", "plain", "--actor", f"me{BAD_BYTE}"], "--actor"),
    (["--actor", f"me{BAD_BYTE}", "job", "disable", "plain"], "--actor"),
    (["job", "remove", "plain", "--reason", f"why{BAD_BYTE}", "--yes"], "--reason"),
    (["enqueue", f"plain{BAD_BYTE}"], "JOB"),
    (["enqueue", "plain", "--key", f"order-{BAD_BYTE}42"], "--key"),
    (["occurrence", "list", "--kind", f"{BAD_BYTE}"], "--kind"),
    (["occurrence", "list", "--job", f"p{BAD_BYTE}"], "--job"),
    (["occurrence", "show", f"occ_{BAD_BYTE}"], "OCCURRENCE"),
    (["cancel", "occ_x", "--reason", f"r{BAD_BYTE}", "--yes"], "--reason"),
    (["history", "--type", f"t{BAD_BYTE}"], "--type"),
    (["explain", f"plain{BAD_BYTE}"], "JOB"),
    (["dead-letter", "requeue", "--all", "--reason", f"r{BAD_BYTE}", "--yes"], "--reason"),
]


@pytest.mark.parametrize(
    ("argv", "option"), CLI_TEXT_ARGUMENTS, ids=[" ".join(a[:2]) for a, _ in CLI_TEXT_ARGUMENTS]
)
def test_the_command_line_refuses_bytes_that_are_not_utf8_as_a_usage_error(target, argv, option):
    with jobledger.App(target, authorize=jobledger.allow_all) as app:
        app.ensure_job("plain", "work")
        before = _stored(app.store)
        code, err = _cli(target, *argv)
        assert code == 2, err
        first = err.splitlines()[0]
        assert first.startswith(f"error: SCHEDULER_INVALID_ARGUMENT: {option} is not valid UTF-8: ")
        assert "the byte 0xff at byte" in first
        assert "\\xff" in first  # shown escaped …
        assert BAD_BYTE not in err  # … never raw
        assert "INTERNAL" not in err
        assert _stored(app.store) == before


def test_a_json_argument_with_a_byte_that_is_not_utf8_is_a_usage_error(target):
    with jobledger.App(target, authorize=jobledger.allow_all) as app:
        app.ensure_job("plain", "work")
        before = _stored(app.store)
        for argv in (
            ["enqueue", "plain", "--payload", '{"to": "caf' + BAD_BYTE + '"}'],
            ["job", "add", "new", "--kind", "work", "--payload", f'["{BAD_BYTE}"]'],
        ):
            code, err = _cli(target, *argv)
            assert code == 2, err
            assert "argument --payload: not valid UTF-8: the byte 0xff at byte" in err
            assert BAD_BYTE not in err
        assert _stored(app.store) == before
        # An escaped lone surrogate is valid JSON text, and a JSON value may hold it (SPEC §2
        # "Text"): the payload is stored as written.
        code, err = _cli(target, "enqueue", "plain", "--payload", '["\\udcff"]')
        assert code == 0, err
        [occurrence] = app.store.list_occurrences(limit=10).items
        assert occurrence.payload == ["\udcff"]


def test_real_argv_bytes_through_the_installed_command(target):
    """Python itself decodes argv (surrogateescape): the same refusal from a real process."""
    import os
    import subprocess
    import sys

    jobledger.open_store(target, migrate=True).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "jobledger.cli", "--db", target]
    for argv in (
        [b"job", b"add", b"bad\xffid", b"--kind", b"k"],
        [b"job", b"add", b"ok", b"--kind", b"k", b"--payload", b'{"a": "x\xff"}'],
    ):
        done = subprocess.run(command + argv, capture_output=True, env=env, timeout=60)
        assert done.returncode == 2, done.stderr
        assert b"SCHEDULER_INVALID_ARGUMENT" in done.stderr
        assert b"the byte 0xff" in done.stderr and b"\xff" not in done.stderr
    with jobledger.open_store(target) as store:
        assert store.list_jobs() == []


def test_a_store_path_may_hold_any_bytes(tmp_path):
    path = str(tmp_path / "db" / f"jobs-{BAD_BYTE}.sqlite3")  # a Latin-1 name, say
    code, err = _cli(path, "db", "init")
    assert code == 0, err
    code, err = _cli(path, "job", "add", "j", "--kind", "work")
    assert code == 0, err
    with jobledger.open_store(path) as store:
        assert store.get_job("j") is not None


def test_a_stored_lone_surrogate_is_shown_as_its_escape(target):
    """A payload and result may hold a lone surrogate (SPEC §2 "Text"); the CLI writes it to a
    strict UTF-8 stdout as its escape instead of failing with UnicodeEncodeError."""
    import os
    import subprocess
    import sys

    with jobledger.App(target, authorize=jobledger.allow_all) as app:
        app.ensure_job("plain", "work")
        occurrence = app.enqueue("plain", payload={"note": "a" + chr(0xD800) + "b"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, "-m", "jobledger.cli", "--db", target]
    for argv in (
        ["occurrence", "show", occurrence.id],
        ["--json", "occurrence", "show", occurrence.id],
    ):
        done = subprocess.run(command + argv, capture_output=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert b"a\\ud800b" in done.stdout, done.stdout
