"""`jobledger explain`, `plan` and `stats`."""

from __future__ import annotations

from jobledger.planning.explain import explain
from tests.system.cli.conftest import AUTHORITY, make_dead_letter


def test_explain_a_cron_schedule_with_dst_notes(cli):
    cli.ok(
        "job", "add", "dst", "--kind", "k", "--cron", "30 2 * 3 0", "--timezone", "America/New_York"
    )
    document = cli.json("explain", "dst", "--count", "10")
    with cli.open() as store:
        expected = explain(store, "dst", count=10).to_dict()
    assert {k: v for k, v in document.items() if k != "now"} == {
        k: v for k, v in expected.items() if k != "now"
    }
    assert document["isSchedule"] is True and len(document["nextFireTimes"]) == 10
    assert any("does not exist" in note for note in document["notes"])  # a spring-forward Sunday
    text = cli.ok("explain", "dst", "--count", "10", "--tz", "America/New_York").out
    assert "schedule: at 02:30 on Sunday in March (America/New_York)" in text
    assert "note: shifted: 02:30 does not exist" in text
    assert "-04:00" in text or "-05:00" in text  # instants printed in --tz
    assert "03:00 America/New_York)" in text  # the wall time of the shifted slot


def test_explain_skips_and_the_current_lease(cli):
    cli.ok("job", "add", "late", "--kind", "k", "--at", "2020-01-01T00:00:00Z", "--misfire", "skip")
    cli.ok("job", "add", "fires", "--kind", "k", "--at", "2020-01-01T00:00:00Z")
    plan = cli.json("plan")
    assert set(plan) == {
        "now",
        "enqueued",
        "skipped",
        "nextDueAt",
        "plannedJobs",
        "lostRaces",
        "unreadable",
    }
    assert [o["jobId"] for o in plan["enqueued"]] == ["fires"]
    assert [(s["jobId"], s["reason"], s["count"]) for s in plan["skipped"]] == [
        ("late", "misfire", 1)
    ]
    assert "0 enqueued" in cli.ok("plan").out  # nothing left to plan
    late = cli.json("explain", "late")
    assert [s["reason"] for s in late["recentSkips"]] == ["misfire"]
    assert "recent skips (newest first):" in cli.ok("explain", "late").out
    with cli.open() as store:
        claimed = store.claim_next(owner_id="worker-7", lease_ms=60_000)
    fires = cli.json("explain", "fires")
    assert fires["currentOccurrence"]["id"] == claimed.id
    assert fires["currentOccurrence"]["leaseOwner"] == "worker-7"
    assert "lease: held by worker-7 until" in cli.ok("explain", "fires").out


def test_explain_errors_and_manual_jobs(cli):
    with cli.open() as store:
        store.create_job(id="manual", kind="k", authority=AUTHORITY)
    manual = cli.json("explain", "manual")
    assert manual["isSchedule"] is False and manual["remarks"]
    assert "schedule: none" in cli.ok("explain", "manual").out
    cli("explain", "nope").assert_one_line_error("SCHEDULER_NOT_FOUND", 3)
    cli("explain", "manual", "--count", "0").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    cli("explain", "manual", "--count", "101").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )


def test_stats(cli):
    with cli.open() as store:
        store.create_job(id="mail", kind="email", authority=AUTHORITY, max_attempts=1)
        store.create_job(id="sms", kind="sms", authority=AUTHORITY)
        make_dead_letter(store, "mail", "dead")
        store.enqueue_occurrence(job_id="mail", scheduled_for=0, trigger_key="waiting")
        store.enqueue_occurrence(job_id="sms", scheduled_for=0, trigger_key="a")
        store.enqueue_occurrence(job_id="sms", scheduled_for=0, trigger_key="b")
        held = store.claim_next(owner_id="worker-9", lease_ms=60_000, job_kind="sms")
        store.register_worker(
            worker_id="worker-9",
            hostname="host-1",
            pid=42,
            info={"kinds": ["sms"], "concurrency": 4},
        )
        store.register_worker(
            worker_id="worker-hung",
            hostname="host-2",
            pid=43,
            info={
                "kinds": ["sms"],
                "concurrency": 2,
                "stuckSlots": 1,
                "stuckOccurrences": ["occ-hung-1"],
            },
        )
    document = cli.json("stats", "--window", "1h")
    assert set(document) == {
        "target",
        "now",
        "occurrences",
        "oldestDue",
        "leaseHolders",
        "workers",
        "throughput",
    }
    assert document["occurrences"]["byStatus"]["dead_letter"] == 1
    assert document["occurrences"]["byKind"]["sms"]["running"] == 1
    assert document["occurrences"]["byKind"]["email"]["queued"] == 1
    due = {item["kind"]: item for item in document["oldestDue"]}
    assert set(due) == {"email", "sms"} and due["sms"]["waitingMs"] > 0
    assert due["sms"]["occurrenceId"] != held.id  # a live lease is not due
    [holder] = document["leaseHolders"]
    assert (holder["ownerId"], holder["leases"]) == ("worker-9", 1)
    workers = {worker["workerId"]: worker for worker in document["workers"]}
    assert workers["worker-9"]["info"]["concurrency"] == 4
    # Slots stuck in a handler past its time limit, as each worker last reported them.
    assert (workers["worker-9"]["stuckSlots"], workers["worker-hung"]["stuckSlots"]) == (0, 1)
    throughput = document["throughput"]
    assert throughput["windowMs"] == 3_600_000
    assert throughput["totals"] == {"succeeded": 0, "retried": 0, "deadLettered": 1}
    assert throughput["settledPerMinute"] > 0
    text = cli.ok("stats").out
    for needle in (
        "occurrences by kind and status",
        "oldest due",
        "lease holders",
        "worker-9",
        "host-1",
        "throughput over the last 15m",
        "1 dead-lettered",
        due["sms"]["occurrenceId"],
        "STUCK",
        "worker-hung: 1 slot(s) stuck in a handler past its time limit (occ-hung-1)",
    ):
        assert needle in text
    cli("stats", "--window", "forever").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


def test_stats_on_an_empty_store(cli):
    document = cli.json("stats")
    assert document["oldestDue"] == [] and document["workers"] == []
    text = cli.ok("stats").out
    assert "nothing is due" in text and "no live leases" in text and "nothing settled" in text


def test_stats_and_job_show_mark_capped_counts(cli, monkeypatch):
    """Counts stop at COUNT_CAP: a count that reached it reads "≥n" (text) and is listed under
    occurrences.capped (--json); the job's counts say they are of its newest occurrences."""
    from jobledger.cli import jobs, stats

    monkeypatch.setattr(stats, "COUNT_CAP", 2)
    monkeypatch.setattr(jobs, "COUNT_CAP", 2)
    with cli.open() as store:
        store.create_job(id="sms", kind="sms", authority=AUTHORITY)
        store.create_job(id="mail", kind="email", authority=AUTHORITY)
        for key in ("a", "b", "c"):
            store.enqueue_occurrence(job_id="sms", scheduled_for=0, trigger_key=key)
        store.enqueue_occurrence(job_id="mail", scheduled_for=0, trigger_key="a")
    document = cli.json("stats")
    assert document["occurrences"]["cap"] == 2
    assert document["occurrences"]["capped"] == {"sms": ["queued"]}
    assert document["occurrences"]["byKind"]["sms"]["queued"] == 2
    assert document["occurrences"]["byKind"]["email"]["queued"] == 1
    text = cli.ok("stats").out
    assert "each counted up to 2" in text
    sms = next(line for line in text.splitlines() if line.startswith("sms"))
    assert "≥2" in sms
    email = next(line for line in text.splitlines() if line.startswith("email"))
    assert "≥" not in email
    shown = cli.json("job", "show", "sms")
    assert shown["occurrencesCapped"] is True and shown["occurrences"] == {"queued": 2}
    assert "queued ≥2 (of its newest 2)" in cli.ok("job", "show", "sms").out
    assert cli.json("job", "show", "mail")["occurrencesCapped"] is False
