"""`jobledger job …`: definitions with schedule flags, CAS updates, the actor in the audit log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import jobledger
from tests.system.cli.conftest import AUTHORITY, TtyInput

JOB_KEYS = {
    "id",
    "kind",
    "enabled",
    "revision",
    "maxAttempts",
    "schedule",
    "trigger",
    "payload",
    "authority",
    "createdAt",
    "updatedAt",
    "operatorFields",
}


def _events(cli, job_id, event_type):
    with cli.open() as store:
        return [e for e in store.history(job_id=job_id, limit=200) if e.type == event_type]


def test_add_a_cron_job_stores_what_app_schedule_stores(cli):
    job = cli.json(
        "--actor",
        "ops:alice",
        "job",
        "add",
        "nightly",
        "--kind",
        "email.digest",
        "--cron",
        "30 2 * * *",
        "--timezone",
        "America/New_York",
        "--nonexistent",
        "skip",
        "--ambiguous",
        "first",
        "--misfire",
        "catch_up",
        "--misfire-grace",
        "5m",
        "--catch-up-limit",
        "7",
        "--jitter",
        "30s",
        "--payload",
        '{"to": "ops@example.com"}',
        "--max-attempts",
        "5",
    )["job"]
    assert set(job) == JOB_KEYS
    assert job["revision"] == 1 and job["enabled"] is True and job["maxAttempts"] == 5
    assert job["schedule"] == "at 02:30 every day (America/New_York)"
    assert job["authority"]["principal"] == {"type": "ops", "id": "alice"}  # from the actor
    with cli.open() as store:
        declared = jobledger.App(store).schedule(
            "twin",
            "email.digest",
            cron="30 2 * * *",
            timezone="America/New_York",
            nonexistent="skip",
            ambiguous="first",
            misfire="catch_up",
            misfire_grace=timedelta(minutes=5),
            catch_up_limit=7,
            jitter=timedelta(seconds=30),
        )
        assert job["trigger"] == declared.trigger
    [created] = _events(cli, "nightly", "job_created")
    assert created.data["actor"] == "ops:alice"


def test_add_every_at_and_manual_jobs(cli):
    every = cli.json(
        "job", "add", "tick", "--kind", "k", "--every", "90s", "--anchor", "2026-01-01T00:00:05Z"
    )["job"]
    assert every["trigger"]["type"] == "every"
    assert every["trigger"]["intervalMs"] == 90_000
    assert every["trigger"]["anchorMs"] == 1_767_225_605_000
    once = cli.json("job", "add", "once", "--kind", "k", "--at", "2030-01-01T09:00:00+01:00")["job"]
    assert once["trigger"]["atMs"] == int(datetime(2030, 1, 1, 8, tzinfo=UTC).timestamp()) * 1000
    manual = cli.json(
        "job",
        "add",
        "manual",
        "--kind",
        "k",
        "--principal",
        "service:billing",
        "--workspace",
        "ws-1",
        "--tenant",
        "t-1",
        "--disabled",
    )["job"]
    assert manual["trigger"] == {} and manual["schedule"] is None and manual["enabled"] is False
    assert manual["authority"]["principal"] == {"type": "service", "id": "billing"}
    assert (manual["authority"]["workspaceId"], manual["authority"]["tenantId"]) == ("ws-1", "t-1")
    text = cli.ok("job", "add", "other", "--kind", "k").out
    assert "enqueued by callers" in text


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--misfire", "skip"), "--misfire applies only to a scheduled job"),
        (("--timezone", "UTC"), "--timezone applies only to a cron schedule"),
        (("--every", "5m", "--timezone", "Europe/Paris"), "--timezone applies only to --cron"),
        (("--cron", "* * * * *", "--anchor", "@0"), "--anchor applies only to --every"),
        (("--anchor", "@0"), "--anchor applies only to an interval schedule"),
        (("--cron", "61 * * * *"), "SCHEDULER_INVALID_ARGUMENT"),
        (("--cron", "* * * * *", "--timezone", "Mars/Base"), "SCHEDULER_INVALID_ARGUMENT"),
        (("--every", "500ms"), "SCHEDULER_INVALID_ARGUMENT"),
        (("--every", "5"), "not a duration"),
        (("--at", "tomorrow"), "not an instant"),
        (("--cron", "* * * * *", "--every", "5m"), "not allowed with argument"),
        (("--max-attempts", "99"), "SCHEDULER_INVALID_ARGUMENT"),
        (("--max-attempts", "²"), "not a whole number"),
        (("--payload", "{nope"), "not valid JSON"),
        (("--payload", "NaN"), "not valid JSON"),
        (("--principal", "alice"), "TYPE:ID"),
        (("--misfire", "later", "--every", "1m"), "invalid choice"),
    ],
)
def test_bad_definitions_are_one_line_usage_errors(sqlite_cli, argv, needle):
    result = sqlite_cli("job", "add", "j", "--kind", "k", *argv)
    result.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    assert needle in result.err
    assert sqlite_cli.json("job", "list")["jobs"] == []


def test_add_an_existing_job_is_a_conflict(cli):
    cli.ok("job", "add", "j", "--kind", "k")
    cli("job", "add", "j", "--kind", "k").assert_one_line_error("SCHEDULER_CONFLICT", 4)


def test_list_pages_by_id_and_show(cli):
    for name in ("c", "a", "b"):
        cli.ok("job", "add", name, "--kind", "k", "--every", "1h")
    page = cli.json("job", "list", "--limit", "2")
    assert [job["id"] for job in page["jobs"]] == ["a", "b"] and page["nextAfter"] == "b"
    rest = cli.json("job", "list", "--limit", "2", "--after", "b")
    assert [job["id"] for job in rest["jobs"]] == ["c"] and rest["nextAfter"] is None
    human = cli.ok("job", "ls", "--limit", "2")
    assert "every hour" in human.out and "more: jobledger job list --after b" in human.err
    assert human.out.splitlines()[0].split() == [
        "JOB",
        "KIND",
        "STATE",
        "REV",
        "SCHEDULE",
        "UPDATED",
    ]
    with cli.open() as store:
        store.enqueue_occurrence(job_id="a", scheduled_for=store.now(), trigger_key="x")
    shown = cli.json("jobs", "show", "a")
    assert shown["job"]["id"] == "a" and shown["occurrences"] == {"queued": 1}
    assert "occurrences:  queued 1" in cli.ok("job", "show", "a").out
    cli("job", "show", "nope").assert_one_line_error("SCHEDULER_NOT_FOUND", 3)


def test_update_changes_only_what_is_given_with_cas_and_actor(cli):
    cli.ok("job", "add", "j", "--kind", "k", "--cron", "0 3 * * *", "--timezone", "Europe/Paris")
    updated = cli.json(
        "--actor", "bob", "job", "update", "j", "--misfire", "skip", "--payload", "[1]"
    )
    assert updated["changed"] == ["payload", "trigger"]
    job = updated["job"]
    assert job["revision"] == 2
    assert (job["trigger"]["expression"], job["trigger"]["timezone"]) == (
        "0 3 * * *",
        "Europe/Paris",
    )
    assert job["trigger"]["misfire"] == "skip" and job["payload"] == [1]
    [event] = _events(cli, "j", "job_updated")
    assert event.data["actor"] == "bob"
    assert event.data["changedFields"] == ["payload", "trigger"]
    # a new expression keeps the zone; the same values again write nothing
    again = cli.json("job", "update", "j", "--cron", "0 4 * * *")
    assert again["job"]["trigger"]["timezone"] == "Europe/Paris" and again["job"]["revision"] == 3
    same = cli.json("job", "update", "j", "--cron", "0 4 * * *", "--misfire", "skip")
    assert same["changed"] == [] and same["job"]["revision"] == 3
    assert "nothing changed" in cli.ok("job", "update", "j", "--misfire", "skip").out
    # the workspace joins the current authority
    moved = cli.json("job", "update", "j", "--workspace", "ws-9")["job"]
    assert moved["authority"]["workspaceId"] == "ws-9"
    assert moved["authority"]["principal"] == job["authority"]["principal"]
    # JSON null is a payload like any other
    assert cli.json("job", "update", "j", "--payload", "null")["job"]["payload"] is None
    # a manual job again
    manual = cli.json("job", "update", "j", "--no-schedule")["job"]
    assert manual["trigger"] == {} and manual["schedule"] is None


def test_update_errors(cli):
    cli.ok("job", "add", "j", "--kind", "k", "--every", "1m")
    stale = cli("job", "update", "j", "--kind", "k2", "--expected-revision", "7")
    stale.assert_one_line_error("SCHEDULER_REVISION_CONFLICT", 4)
    assert "hint: the job changed meanwhile" in stale.err
    cli("job", "update", "j").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    cli("job", "update", "nope", "--kind", "k").assert_one_line_error("SCHEDULER_NOT_FOUND", 3)
    cli("job", "update", "j", "--timezone", "UTC").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )
    cli("job", "update", "j", "--no-schedule", "--misfire", "skip").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )
    assert cli.json("job", "show", "j")["job"]["revision"] == 1


def test_enable_and_disable_are_audited_and_idempotent(cli):
    cli.ok("job", "add", "j", "--kind", "k")
    off = cli.json("--actor", "carol", "job", "disable", "j")
    assert off["job"]["enabled"] is False and off["changed"] == ["enabled"]
    assert "already disabled" in cli.ok("job", "disable", "j").out
    on = cli.json("job", "enable", "j", "--actor", "dave")  # global option after the command
    assert on["job"]["enabled"] is True and on["job"]["revision"] == 3
    assert [e.data["actor"] for e in _events(cli, "j", "job_updated")] == ["dave", "carol"]
    cli("job", "disable", "j", "--expected-revision", "1").assert_one_line_error(
        "SCHEDULER_REVISION_CONFLICT", 4
    )


def test_remove_asks_refuses_live_work_and_audits(cli):
    cli.ok("job", "add", "j", "--kind", "k")
    with cli.open() as store:
        occurrence = store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    live = cli("job", "remove", "j", "--reason", "obsolete")  # no prompt: the store refuses
    live.assert_one_line_error("SCHEDULER_JOB_HAS_LIVE_OCCURRENCES", 4)
    assert "jobledger cancel" in live.err
    cli.ok("cancel", occurrence.id, "--reason", "obsolete", "--yes")
    cli("job", "remove", "j", "--reason", "obsolete").assert_one_line_error(
        "SCHEDULER_CONFIRMATION_REQUIRED", 2
    )
    cli("job", "remove", "j", "--reason", "x", stdin=TtyInput("")).assert_one_line_error(
        "SCHEDULER_ABORTED", 1
    )
    assert cli.json("job", "show", "j")["job"]["id"] == "j"
    removed = cli.json(
        "--actor", "erin", "job", "rm", "j", "--reason", "obsolete", stdin=TtyInput("y\n")
    )
    assert removed["removed"]["jobId"] == "j" and removed["removed"]["occurrences"] == 1
    cli("job", "show", "j").assert_one_line_error("SCHEDULER_NOT_FOUND", 3)
    with cli.open() as store:
        [record] = [r for r in store.audit_log() if r.action == "job_removed"]
    assert (record.actor, record.subject, record.data["reason"]) == ("erin", "j", "obsolete")
    cli("job", "remove", "j", "--reason", "again", "--yes").assert_one_line_error(
        "SCHEDULER_NOT_FOUND", 3
    )


def test_missing_required_arguments_are_usage_errors(cli):
    result = cli("job", "add", "j")
    result.assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    assert "--kind" in result.err and "hint: see `jobledger job add --help`" in result.err
    cli("job").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    cli("jobb", "list").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    cli("job", "remove", "j", "--yes").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


def test_job_show_says_which_fields_an_operator_set(cli):
    """Issue 32 item 4: the source of a job's values is shown."""
    with cli.open() as store:
        store.create_job(id="digest", kind="send_digest", authority=AUTHORITY)
    cli.ok("job", "disable", "digest", "--actor", "ops:alice")
    assert cli.json("job", "show", "digest")["job"]["operatorFields"] == ["enabled"]
    assert "set by:       an operator (enabled" in cli.ok("job", "show", "digest").out


def test_explain_says_an_operator_disabled_the_job(cli):
    with cli.open() as store:
        store.create_job(id="digest", kind="send_digest", authority=AUTHORITY)
    cli.ok("job", "disable", "digest")
    remarks = cli.json("explain", "digest")["remarks"]
    assert any(remark.startswith("set by an operator: enabled") for remark in remarks), remarks


def test_backfill_enqueues_the_missing_slots_once_and_records_the_actor(cli):
    cli.ok("job", "add", "hourly", "--kind", "report", "--every", "1h")
    with cli.open() as store:
        now = store.now()
    day = now - now % 86_400_000 - 86_400_000
    frm, to = f"@{day}", f"@{day + 6 * 3_600_000}"
    first = cli.json("--actor", "ops:ada", "job", "backfill", "hourly", "--from", frm, "--to", to)
    slots = [o["scheduledFor"] for o in first["created"]]
    assert len(slots) == 6 and first["actor"] == "ops:ada" and first["jobId"] == "hourly"
    again = cli.ok("job", "backfill", "hourly", "--from", frm, "--to", to)
    assert "every slot in the range has an occurrence" in again.out
    records = cli.json("audit")["records"]
    backfills = [r for r in records if r["action"] == "schedule_backfilled"]
    assert [r["data"]["created"] for r in backfills] == [0, 6]
    too_many = cli("job", "backfill", "hourly", "--from", "@0", "--to", to)
    assert too_many.code == 2 and "10000" in too_many.err
    not_scheduled = cli("job", "backfill", "nope", "--from", frm, "--to", to)
    assert not_scheduled.code != 0 and "Traceback" not in not_scheduled.err


def test_enqueue_or_show_of_a_kind_names_its_job(cli):
    with cli.open() as store:
        store.create_job(id="send-confirmation", kind="send_confirmation", authority=AUTHORITY)
    for argv in (("enqueue", "send_confirmation"), ("job", "show", "send_confirmation")):
        result = cli(*argv)
        result.assert_one_line_error("SCHEDULER_NOT_FOUND", 3)
        assert "did you mean job send-confirmation (kind send_confirmation)?" in result.err
