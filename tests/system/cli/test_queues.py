"""`jobledger queue list|show|set|pause|resume` (SPEC §7) on both stores."""

from __future__ import annotations

from datetime import timedelta

import jobledger
from tests.system.cli.conftest import AUTHORITY


def _backlog(cli, queue="mail", count=3, partition=None):
    with cli.open() as store:
        store.create_job(id="j", kind="k", authority=AUTHORITY, queue=queue)
        for index in range(count):
            store.enqueue_occurrence(
                job_id="j", scheduled_for=store.now(), trigger_key=f"t{index}", partition=partition
            )


def test_set_changes_only_the_limits_given_and_is_audited(cli):
    first = cli.json("queue", "set", "mail", "--concurrency", "2", "--rate", "10/1m")
    assert first["changed"] and first["queue"]["concurrency"] == 2
    assert first["queue"]["rate"] == {"limit": 10, "perMs": 60_000}
    kept = cli.json("queue", "set", "mail", "--worker-concurrency", "1", "--actor", "alice")
    assert (kept["queue"]["concurrency"], kept["queue"]["workerConcurrency"]) == (2, 1)
    assert kept["queue"]["rate"] == {"limit": 10, "perMs": 60_000}
    removed = cli.json("queue", "set", "mail", "--rate", "none")
    assert removed["queue"]["rate"] is None and removed["queue"]["concurrency"] == 2
    same = cli.json("queue", "set", "mail", "--concurrency", "2")
    assert not same["changed"]
    replaced = cli.json("queue", "set", "mail", "--replace", "--partition-rate", "1/1s")
    assert replaced["queue"]["concurrency"] is None
    assert replaced["queue"]["partitionRate"] == {"limit": 1, "perMs": 1000}
    with cli.open() as store:
        queue = store.get_queue("mail")
        records = [r for r in store.audit_log() if r.action == "queue_updated"]
    assert queue is not None and queue.partition_rate == jobledger.Rate(1, timedelta(seconds=1))
    assert len(records) == 4  # the unchanged declaration wrote nothing
    assert "alice" in {record.actor for record in records}


def test_set_refuses_bad_values_and_changes_nothing(cli):
    cli.ok("queue", "set", "mail", "--concurrency", "3")
    for argv in (
        ("--concurrency", "0"),
        ("--rate", "10/500ms"),
        ("--rate", "0/1m"),
        ("--rate", "ten"),
        ("--partition-concurrency", "-1"),
    ):
        cli("queue", "set", "mail", *argv).assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    cli("queue", "set", "mail").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    cli("queue", "show", "x" * 65).assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    with cli.open() as store:
        queue = store.get_queue("mail")
    assert queue is not None and queue.concurrency == 3 and queue.revision == 1


def test_pause_show_and_resume(cli):
    _backlog(cli)
    paused = cli.json("queue", "pause", "mail", "--reason", "incident 42", "--actor", "ops")
    assert paused["queue"]["paused"] and paused["queue"]["pausedBy"] == "ops"
    with cli.open() as store:
        assert store.claim_next(owner_id="w", lease_ms=60_000) is None
    shown = cli.json("queue", "show", "mail")
    assert shown["queue"]["paused"] and shown["queue"]["pausedReason"] == "incident 42"
    assert (shown["depth"], shown["ready"], shown["running"]) == (3, 3, 0)
    assert [reason["code"] for reason in shown["holdingBack"]] == ["queue_paused"]
    text = cli.ok("queue", "show", "mail").out
    assert "paused:       yes, since" in text and "by ops: incident 42" in text
    assert "depth:        3 queued (ready 3, waiting 0, held 0)" in text
    listed = cli.ok("queue", "list").out.splitlines()
    assert listed[0].split() == [
        "QUEUE", "PAUSED", "DEPTH", "READY", "WAITING", "HELD", "RUNNING", "LIMITS"
    ]  # fmt: skip
    assert listed[1].split()[:7] == ["mail", "paused", "3", "3", "0", "0", "0"]
    resumed = cli.json("queue", "resume", "mail", "--actor", "ops")
    assert resumed["changed"] and not resumed["queue"]["paused"]
    again = cli.ok("queue", "resume", "mail")
    assert "not paused; nothing changed" in again.out
    with cli.open() as store:
        assert store.claim_next(owner_id="w", lease_ms=60_000) is not None
        actions = [r.action for r in store.audit_log()]
    assert actions.count("queue_paused") == 1 and actions.count("queue_resumed") == 1


def test_list_shows_running_held_and_limits(cli):
    _backlog(cli, queue="reports", count=3, partition="customer:1")
    cli.ok("queue", "set", "reports", "--partition-concurrency", "1")
    with cli.open() as store:
        assert store.claim_next(owner_id="w", lease_ms=60_000) is not None
    document = cli.json("queue", "list")
    [reports] = [q for q in document["queues"] if q["queue"]["name"] == "reports"]
    assert (reports["held"], reports["running"], reports["ready"]) == (2, 1, 0)
    assert "per partition 1" in cli.ok("queue", "list").out
    empty = cli.json("queue", "show", "nobody")
    assert empty["queue"]["revision"] == 0 and empty["depth"] == 0


def test_occurrence_show_says_why_it_is_not_running(cli):
    _backlog(cli, queue="mail", count=1)
    with cli.open() as store:
        [occurrence] = store.list_occurrences(job_id="j").items
    cli.ok("queue", "pause", "mail", "--reason", "incident")
    shown = cli.json("occurrence", "show", occurrence.id)
    assert shown["queue"] == {"name": "mail", "priority": 0, "partition": None}
    assert [reason["code"] for reason in shown["waiting"]] == ["queue_paused"]
    assert "not running:  queue paused by" in cli.ok("occurrence", "show", occurrence.id).out
    explained = cli.json("explain", "j")
    assert explained["currentOccurrence"]["waiting"][0]["code"] == "queue_paused"
    assert "not running: queue paused" in cli.ok("explain", "j").out


def test_an_operators_limit_survives_the_next_process_that_imports_the_app(cli):
    """Issue 32 item 4: `queue set` was reverted by the next process importing the app; `queue
    show` says which values an operator set."""

    def start_the_app() -> None:  # what every process importing the app does
        with jobledger.App(cli.target, name="shop", authorize=jobledger.allow_all) as app:
            app.queue("emails", concurrency=2, rate=jobledger.Rate(5, timedelta(seconds=1)))

    start_the_app()
    cli.ok("queue", "set", "emails", "--concurrency", "8", "--actor", "ops:alice")
    start_the_app()
    shown = cli.json("queue", "show", "emails")
    assert shown["queue"]["concurrency"] == 8
    assert shown["queue"]["sources"]["concurrency"] == "operator"
    assert shown["queue"]["sources"]["rate"] == "declaration"
    text = cli.ok("queue", "show", "emails").out
    assert "set by:       an operator (concurrency" in text
    with cli.open() as store:
        updates = [r for r in store.audit_log() if r.action == "queue_updated"]
    assert [r.actor for r in reversed(updates)] == ["app:shop", "ops:alice"]  # no fight


def test_a_limit_holding_work_back_says_an_operator_set_it(cli):
    _backlog(cli, queue="mail", count=2)
    cli.ok("queue", "set", "mail", "--concurrency", "1")
    with cli.open() as store:
        assert store.claim_next(owner_id="w", lease_ms=60_000) is not None
    shown = cli.json("queue", "show", "mail")
    [reason] = shown["holdingBack"]
    assert "set by an operator" in reason["text"], reason
