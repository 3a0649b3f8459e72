"""`jobledger enqueue`, `occurrence list|show`, `cancel` and `dead-letter list|requeue`."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jobledger
from jobledger.cli import main
from tests.system.cli.conftest import AUTHORITY, TtyInput, make_dead_letter

OCCURRENCE_KEYS = {
    "id",
    "jobId",
    "jobRevision",
    "kind",
    "status",
    "triggerKey",
    "idempotencyKey",
    "scheduledFor",
    "availableAt",
    "attempt",
    "maxAttempts",
    "fence",
    "leaseOwner",
    "leaseExpiresAt",
    "payload",
    "authority",
    "lastError",
    "result",
    "createdAt",
    "updatedAt",
    "settledAt",
    "startedAt",
    "queue",
    "priority",
    "partition",
    "tags",
    "meta",
    "progress",
}


MISSING = "occ_" + "0" * 12  # the shape of an id, and no occurrence has it


def _job(cli, job_id="j", **options):
    with cli.open() as store:
        store.create_job(id=job_id, kind="k", authority=AUTHORITY, **options)


# -- enqueue -----------------------------------------------------------------------------------


def test_enqueue_with_a_key_and_an_instant_is_the_apps_occurrence(cli):
    _job(cli, payload={"n": 1})
    [first] = cli.json(
        "enqueue", "j", "--at", "2026-03-08T02:00:00.123-05:00", "--key", "order-42"
    )["occurrences"]
    assert set(first) == OCCURRENCE_KEYS | {"deduplicated"}
    assert first["deduplicated"] is False
    assert first["scheduledFor"] == "2026-03-08T07:00:00.123Z"
    assert first["payload"] == {"n": 1} and first["triggerKey"] == "key:order-42"
    [again] = cli.json("enqueue", "j", "--at", "@1772953200123", "--key", "order-42")["occurrences"]
    assert again["id"] == first["id"] and again["deduplicated"] is True
    with cli.open() as store:
        at = datetime(2026, 3, 8, 7, 0, 0, 123_000, tzinfo=UTC)
        via_app = jobledger.App(store).enqueue("j", key="order-42", at=at)
    assert via_app.id == first["id"] and via_app.deduplicated
    mismatch = cli("enqueue", "j", "--key", "order-42", "--payload", '{"n": 2}')
    mismatch.assert_one_line_error("SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH", 4)


@settings(
    derandomize=True,
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    instant=st.integers(min_value=0, max_value=4_102_444_800_000),
    offset_minutes=st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_cli_and_app_enqueue_the_same_occurrence_for_the_same_instant(
    sqlite_cli, instant, offset_minutes
):
    with sqlite_cli.open() as store:
        if store.get_job("j") is None:
            store.create_job(id="j", kind="k", authority=AUTHORITY)
    at = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=instant)).astimezone(
        timezone(timedelta(minutes=offset_minutes))
    )
    key = f"k-{instant}-{offset_minutes}"
    [via_cli] = sqlite_cli.json(
        "enqueue", "j", "--at", at.isoformat(timespec="milliseconds"), "--key", key
    )["occurrences"]
    with sqlite_cli.open() as store:
        via_app = jobledger.App(store).enqueue("j", at=at, key=key)
    assert via_app.id == via_cli["id"] and via_app.deduplicated


def test_enqueue_now_later_and_many(cli):
    _job(cli, payload={"default": True})
    with cli.open() as store:
        before = store.now()
    [now] = cli.json("enqueue", "j", "--payload", '"hi"')["occurrences"]
    assert now["payload"] == "hi" and now["status"] == "queued"
    [null] = cli.json("enqueue", "j", "--payload", "null")["occurrences"]
    assert null["payload"] is None
    [later] = cli.json("enqueue", "j", "--delay", "1h")["occurrences"]
    due = datetime.fromisoformat(later["availableAt"])
    start = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=before)
    assert timedelta(hours=1) <= due - start < timedelta(hours=1, minutes=1)
    many = cli.json("enqueue", "j", "--count", "3")["occurrences"]
    assert len({o["id"] for o in many}) == 3
    assert "enqueued 3 occurrences of job j" in cli.ok("enqueue", "j", "--count", "3").out
    cli("enqueue", "j", "--count", "2", "--key", "k").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )
    cli("enqueue", "j", "--at", "@0", "--delay", "1m").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )


def test_enqueue_errors(cli):
    _job(cli, enabled=False)
    cli("enqueue", "nope").assert_one_line_error("SCHEDULER_NOT_FOUND", 3)
    disabled = cli("enqueue", "j")
    disabled.assert_one_line_error("SCHEDULER_JOB_DISABLED", 4)
    assert "jobledger job enable" in disabled.err
    for bad in ("²", "2026-01-01T00:00:00", "yesterday", "@-1"):
        result = cli("enqueue", "j", "--at", bad)
        result.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
        assert "argument --at:" in result.err


# -- listing and showing -----------------------------------------------------------------------


def test_list_filters_and_pages(cli):
    _job(cli, "a")
    _job(cli, "b")
    with cli.open() as store:
        for n in range(3):
            store.enqueue_occurrence(job_id="a", scheduled_for=n, trigger_key=f"t{n}")
        store.enqueue_occurrence(job_id="b", scheduled_for=0, trigger_key="t")
        claimed = store.claim_next(owner_id="w1", lease_ms=60_000)
    page = cli.json("occurrence", "list", "--limit", "2")
    assert len(page["occurrences"]) == 2 and page["nextCursor"] is not None
    rest = cli.json("occurrence", "list", "--limit", "2", "--cursor", page["nextCursor"])
    assert len(rest["occurrences"]) == 2 and rest["nextCursor"] is None
    seen = {o["id"] for o in page["occurrences"] + rest["occurrences"]}
    assert len(seen) == 4
    assert [o["jobId"] for o in cli.json("occurrences", "list", "--job", "b")["occurrences"]] == [
        "b"
    ]
    running = cli.json("occurrence", "list", "--status", "running")["occurrences"]
    assert [o["id"] for o in running] == [claimed.id] and running[0]["leaseOwner"] == "w1"
    assert cli.json("occurrence", "list", "--kind", "other")["occurrences"] == []
    human = cli.ok("occurrence", "ls", "--status", "running")
    assert claimed.id[:16] in human.out and "w1 until" in human.out
    assert "no occurrences" in cli.ok("occurrence", "list", "--kind", "other").out
    for bad in ("²", "nonsense", "1.occ_XYZ"):
        cli("occurrence", "list", "--cursor", bad).assert_one_line_error(
            "SCHEDULER_INVALID_ARGUMENT", 2
        )
    cli("occurrence", "list", "--status", "lost").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )


def test_list_finds_one_customers_work_by_key_partition_and_queue(cli):
    _job(cli, "charge", queue="payments")
    _job(cli, "ship")
    cli.json("enqueue", "charge", "--key", "order-21")
    cli.json("enqueue", "ship", "--key", "order-21")
    cli.json("enqueue", "ship", "--key", "order-22")
    with cli.open() as store:
        store.enqueue_occurrence(
            job_id="ship", scheduled_for=0, trigger_key="t", partition="customer:7"
        )
    by_key = cli.json("occurrence", "list", "--key", "order-21")["occurrences"]
    assert [(o["jobId"], o["triggerKey"]) for o in by_key] == [
        ("ship", "key:order-21"),
        ("charge", "key:order-21"),
    ]
    assert by_key[1]["queue"] == "payments" and by_key[1]["partition"] is None
    by_partition = cli.json("occurrence", "list", "--partition", "customer:7")["occurrences"]
    assert [(o["jobId"], o["partition"]) for o in by_partition] == [("ship", "customer:7")]
    payments = cli.json("occurrence", "list", "--queue", "payments")["occurrences"]
    assert [o["jobId"] for o in payments] == ["charge"]
    both = cli.json("occurrence", "list", "--key", "order-21", "--job", "charge")
    assert [o["jobId"] for o in both["occurrences"]] == ["charge"]
    human = cli.ok("occurrence", "list", "--key", "order-22")
    assert "ship" in human.out and "charge" not in human.out
    assert "no occurrences" in cli.ok("occurrence", "list", "--key", "order-23").out
    cli("occurrence", "list", "--key", "").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


def test_tags_meta_and_progress_are_given_found_and_shown(cli):
    _job(cli, "charge")
    [tagged] = cli.json(
        "enqueue",
        "charge",
        "--key",
        "order-21",
        "--tag",
        "customer:21",
        "--tag",
        "vip",
        "--meta",
        '{"order": 21}',
    )["occurrences"]
    assert tagged["tags"] == ["customer:21", "vip"] and tagged["meta"] == {"order": 21}
    cli.json("enqueue", "charge", "--tag", "customer:22")
    found = cli.json("occurrence", "list", "--tag", "customer:21")["occurrences"]
    assert [o["id"] for o in found] == [tagged["id"]]
    assert cli.json("occurrence", "list", "--tag", "vip", "--key", "order-21")["occurrences"]
    with cli.open() as store:
        claimed = store.claim_occurrence(occurrence_id=tagged["id"], owner_id="w1", lease_ms=60_000)
        store.record_progress(
            occurrence_id=claimed.id,
            owner_id="w1",
            fence=claimed.fence,
            done=3,
            total=4,
            message="charging",
        )
    shown = cli.json("occurrence", "show", tagged["id"])["occurrence"]
    assert shown["progress"]["done"] == 3 and shown["progress"]["total"] == 4
    assert shown["progress"]["message"] == "charging" and shown["progress"]["attempt"] == 1
    human = cli.ok("occurrence", "show", tagged["id"]).out
    assert "tags:         customer:21, vip" in human
    assert 'meta:         {"order": 21}' in human
    assert "progress:     3 of 4 (75%) — charging, attempt 1" in human
    cli("enqueue", "charge", "--tag", "has space").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )
    cli("enqueue", "charge", "--meta", "[1]").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


def test_show_has_the_audit_timeline(cli):
    _job(cli)
    with cli.open() as store:
        dead = make_dead_letter(store, "j", "t")
    shown = cli.json("occurrence", "show", dead.id)
    assert set(shown) == {"occurrence", "queue", "waiting", "events"}
    assert shown["occurrence"]["status"] == "dead_letter"
    assert shown["occurrence"]["lastError"] == {"code": "boom", "message": "it broke"}
    assert [e["type"] for e in shown["events"]] == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_dead_lettered",
    ]
    assert set(shown["events"][0]) == {
        "eventId",
        "type",
        "occurredAt",
        "jobId",
        "occurrenceId",
        "ownerId",
        "fence",
        "data",
    }
    text = cli.ok("occurrence", "show", dead.id).out
    assert "timeline:" in text and "occurrence_dead_lettered" in text and "boom" in text
    cli("occurrence", "show", MISSING).assert_one_line_error("SCHEDULER_NOT_FOUND", 3)
    cli("occurrence", "show", "occ_missing").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_one_or_many_with_the_actor(cli):
    _job(cli)
    with cli.open() as store:
        ids = [
            store.enqueue_occurrence(job_id="j", scheduled_for=n, trigger_key=f"t{n}").id
            for n in range(3)
        ]
    cli("cancel", ids[0], "--reason", "r").assert_one_line_error(
        "SCHEDULER_CONFIRMATION_REQUIRED", 2
    )
    one = cli.json("--actor", "ops:frank", "cancel", ids[0], "--reason", "bad data", "--yes")
    assert [o["status"] for o in one["cancelled"]] == ["cancelled"] and one["failed"] == []
    two = cli("cancel", *ids[1:], "--reason", "cleanup", stdin=TtyInput("y\n"))
    assert two.code == 0 and "cancelled 2 of 2" in two.err
    with cli.open() as store:
        events = store.events(event_type="occurrence_cancelled")
        assert {(e.data["actor"], e.data["reason"]) for e in events} >= {("ops:frank", "bad data")}
        assert store.get_occurrence(ids[0]).last_error["actor"] == "ops:frank"
    again = cli("cancel", ids[0], "--reason", "again", "--yes")
    again.assert_one_line_error("SCHEDULER_CANCEL_CONFLICT", 4)


def test_cancel_many_reports_each_failure_on_its_own_line(cli):
    _job(cli)
    with cli.open() as store:
        live = store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="a").id
        done = store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="b").id
        store.cancel_occurrence(occurrence_id=done, actor="t", reason="t")
    result = cli("--json", "cancel", live, done, MISSING, "--reason", "r", "--yes")
    assert result.code == 1  # a conflict and a not-found: no single kind
    document = result.json
    assert [o["id"] for o in document["cancelled"]] == [live]
    assert sorted((f["occurrenceId"], f["error"]["code"]) for f in document["failed"]) == sorted(
        [(done, "SCHEDULER_CANCEL_CONFLICT"), (MISSING, "SCHEDULER_NOT_FOUND")]
    )
    assert len(result.error_lines) == 2
    # The count says what happened: one of three cancelled, two failed (not "3/3, 2 failed").
    assert result.err.splitlines()[-1] == "cancelled 1 of 3, 2 failed"
    assert "Traceback" not in result.err
    conflicts = cli("cancel", done, live, "--reason", "r", "--yes")
    assert conflicts.code == 4  # every failure a conflict


# -- dead letters ------------------------------------------------------------------------------


def test_dead_letters_list_and_requeue_one(cli):
    _job(cli, max_attempts=1)
    with cli.open() as store:
        dead = make_dead_letter(store, "j", "t")
    listed = cli.json("dead-letter", "list")["occurrences"]
    assert [o["id"] for o in listed] == [dead.id]
    assert dead.id[:16] in cli.ok("dead-letters", "ls", "--job", "j").out
    assert "no dead letters" in cli.ok("dead-letter", "list", "--job", "other").out
    requeued = cli.json(
        "--actor", "ops:gina", "dead-letter", "requeue", dead.id, "--reason", "fixed upstream"
    )
    [occurrence] = requeued["requeued"]
    assert occurrence["status"] == "retry_wait" and occurrence["maxAttempts"] == 2
    assert requeued["actor"] == "ops:gina"
    with cli.open() as store:
        [event] = store.events(occurrence_id=dead.id, event_type="occurrence_requeued")
    assert event.data["actor"] == "ops:gina" and event.data["reason"] == "fixed upstream"
    again = cli("dead-letter", "requeue", dead.id, "--reason", "twice")
    again.assert_one_line_error("SCHEDULER_REQUEUE_EVIDENCE_CONFLICT", 4)
    assert "hint:" in again.err


def test_requeue_all_asks_and_shows_progress(cli):
    _job(cli, "a", max_attempts=1)
    _job(cli, "b", max_attempts=1)
    with cli.open() as store:
        a_dead = [make_dead_letter(store, "a", f"t{n}").id for n in range(3)]
        b_dead = make_dead_letter(store, "b", "t").id
    cli("dead-letter", "requeue", "--all", "--reason", "r").assert_one_line_error(
        "SCHEDULER_CONFIRMATION_REQUIRED", 2
    )
    result = cli(
        "--json",
        "dead-letter",
        "requeue",
        "--all",
        "--job",
        "a",
        "--reason",
        "deploy fixed",
        stdin=TtyInput("y\n"),
    )
    assert result.code == 0, result.err
    assert sorted(o["id"] for o in result.json["requeued"]) == sorted(a_dead)
    assert "Requeue all 3 dead letter(s) of job a?" in result.err
    assert "requeued 3 of 3" in result.err
    assert [o["id"] for o in cli.json("dead-letter", "list")["occurrences"]] == [b_dead]
    nothing = cli.json("dead-letter", "requeue", "--all", "--job", "a", "--reason", "r")
    assert nothing == {"requeued": [], "failed": [], "actor": nothing["actor"]}


def test_requeue_usage_and_fences(cli):
    _job(cli, max_attempts=1)
    with cli.open() as store:
        dead = make_dead_letter(store, "j", "t")
    for argv in (
        ("--reason", "r"),
        (dead.id, "--all", "--reason", "r"),
        (dead.id, "--job", "j", "--reason", "r"),
        (dead.id, dead.id + "x", "--expected-fence", "1", "--reason", "r"),
        (dead.id,),
    ):
        cli("dead-letter", "requeue", *argv).assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    stale = cli("dead-letter", "requeue", dead.id, "--expected-fence", "9", "--reason", "r")
    stale.assert_one_line_error("SCHEDULER_REQUEUE_EVIDENCE_CONFLICT", 4)
    cli("dead-letter", "requeue", MISSING, "--reason", "r").assert_one_line_error(
        "SCHEDULER_NOT_FOUND", 3
    )
    cli.ok("dead-letter", "requeue", dead.id, "--expected-fence", str(dead.fence), "--reason", "r")


# -- short ids and prefixes --------------------------------------------------------------------

SLOT = 1_767_225_600_000
# Two firings of job "j" whose ids share nine hex digits: occ_b858a7b159… and occ_b858a7b156….
TWINS = ("k-180661", "k-32484")


def _twins(cli):
    _job(cli, max_attempts=1)
    with cli.open() as store:
        return [
            store.enqueue_occurrence(job_id="j", scheduled_for=SLOT, trigger_key=key).id
            for key in TWINS
        ]


def test_commands_take_a_unique_start_of_an_occurrence_id(cli):
    first, second = _twins(cli)
    assert first.startswith("occ_b858a7b159") and second.startswith("occ_b858a7b156")
    for name in (first[:16], first[4:14], "OCC_B858A7B159", first):
        shown = cli.json("occurrence", "show", name)
        assert shown["occurrence"]["id"] == first
    events = cli.json("history", "--occurrence", "b858a7b156")["events"]
    assert {e["occurrenceId"] for e in events} == {second}
    cancelled = cli.json("cancel", "b858a7b156", "--reason", "r", "--yes")["cancelled"]
    assert [o["id"] for o in cancelled] == [second]
    # A prefix and the whole id of one occurrence are one target.
    with cli.open() as store:
        dead = make_dead_letter(store, "j", "t")
    requeued = cli.json("dead-letter", "requeue", dead.id[:12], dead.id, "--reason", "r", "--yes")
    assert [o["id"] for o in requeued["requeued"]] == [dead.id] and requeued["failed"] == []


def test_an_ambiguous_start_lists_the_candidates(cli):
    first, second = _twins(cli)
    for argv in (
        ("occurrence", "show", "b858a7b15"),
        ("cancel", "occ_b858a7b1", "--reason", "r", "--yes"),
        ("dead-letter", "requeue", "b858a7b15", "--reason", "r"),
        ("history", "--occurrence", "b858a7b15"),
    ):
        result = cli(*argv)
        result.assert_one_line_error("SCHEDULER_AMBIGUOUS_ID", 2)
        assert f"{second[:16]}…" in result.err and f"{first[:16]}…" in result.err
        assert "give more of it" in result.err
    too_short = cli("occurrence", "show", "b858a7b")
    too_short.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    assert "at least 8 hex digits" in too_short.err
    # Among several targets, an ambiguous one is one failure; the others go ahead.
    with cli.open() as store:
        other = store.enqueue_occurrence(job_id="j", scheduled_for=SLOT, trigger_key="o").id
    result = cli("--json", "cancel", other[:12], "b858a7b15", "--reason", "r", "--yes")
    assert result.code == 2
    assert [o["id"] for o in result.json["cancelled"]] == [other]
    [failure] = result.json["failed"]
    assert failure["occurrenceId"] == "b858a7b15"
    assert failure["error"]["code"] == "SCHEDULER_AMBIGUOUS_ID"
    assert failure["error"]["details"]["candidates"] == [second, first]
    assert result.err.splitlines()[-1] == "cancelled 1 of 2, 1 failed"


class TtyOutput(io.StringIO):
    def isatty(self) -> bool:
        return True


def _terminal(cli, monkeypatch, *argv, columns=120):
    """What a terminal ``columns`` wide shows (tables shrink to fit one)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    out, err = TtyOutput(), io.StringIO()
    code = main(["--db", cli.target, *argv], env=cli.env, stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    return out.getvalue()


def test_tables_show_short_ids_and_leave_the_room_to_the_data(cli, monkeypatch):
    _job(cli, max_attempts=1)
    message = "the upstream answered 503, retry later"
    with cli.open() as store:
        occurrence = store.enqueue_occurrence(job_id="j", scheduled_for=SLOT, trigger_key="t")
        claimed = store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=60_000)
        store.settle(
            occurrence_id=claimed.id,
            owner_id="w",
            fence=claimed.fence,
            outcome="failed",
            error={"code": "http_503", "message": message},
            retryable=False,
        )
    listed = _terminal(cli, monkeypatch, "occurrence", "list", "--job", "j")
    assert occurrence.id[:16] in listed and occurrence.id not in listed
    assert "JOB" not in listed.splitlines()[0]  # --job: the same on every line
    assert f"http_503: {message}" in listed  # whole, in 120 columns
    assert all(len(line) <= 120 for line in listed.splitlines())
    assert "JOB" in _terminal(cli, monkeypatch, "occurrence", "list").splitlines()[0]
    dead = _terminal(cli, monkeypatch, "dead-letter", "list", "--job", "j")
    assert f"http_503: {message}" in dead and "JOB" not in dead.splitlines()[0]
    shown = _terminal(cli, monkeypatch, "occurrence", "show", occurrence.id[:12])
    timeline = shown.split("timeline:\n", 1)[1]
    header = timeline.splitlines()[0].split()
    assert header == ["ID", "AT", "TYPE", "OWNER", "DATA"]  # job and id are in the heading
    history = _terminal(cli, monkeypatch, "history", "--occurrence", occurrence.id[:12])
    assert history.splitlines()[0].split() == ["ID", "AT", "TYPE", "OWNER", "DATA"]
    by_job = _terminal(cli, monkeypatch, "history", "--job", "j")
    assert by_job.splitlines()[0].split() == ["ID", "AT", "TYPE", "OCCURRENCE", "OWNER", "DATA"]
    assert occurrence.id[:16] in by_job and occurrence.id not in by_job
