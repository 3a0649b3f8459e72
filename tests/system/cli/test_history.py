"""`jobledger history` (filters, paging, --follow driven by an injected sleep) and `audit`."""

from __future__ import annotations

import json

from tests.system.cli.conftest import AUTHORITY


def _setup(cli, jobs=("a", "b")):
    with cli.open() as store:
        for job_id in jobs:
            store.create_job(id=job_id, kind="k", authority=AUTHORITY)
        return [
            store.enqueue_occurrence(job_id=job_id, scheduled_for=0, trigger_key="t").id
            for job_id in jobs
        ]


def test_history_filters_and_pages_oldest_first(cli):
    occurrences = _setup(cli)
    everything = cli.json("history")
    types = [(e["jobId"], e["type"]) for e in everything["events"]]
    assert types == [
        ("a", "job_created"),
        ("b", "job_created"),
        ("a", "occurrence_enqueued"),
        ("b", "occurrence_enqueued"),
    ]
    ids = [e["eventId"] for e in everything["events"]]
    assert ids == sorted(ids) and everything["nextBefore"] is None
    page = cli.json("history", "--limit", "2")
    assert [e["eventId"] for e in page["events"]] == ids[2:]
    assert page["nextBefore"] == ids[2]
    older = cli.json("history", "--limit", "2", "--before", str(page["nextBefore"]))
    assert [e["eventId"] for e in older["events"]] == ids[:2]
    assert [e["type"] for e in cli.json("history", "--job", "a")["events"]] == [
        "job_created",
        "occurrence_enqueued",
    ]
    by_occurrence = cli.json("history", "--occurrence", occurrences[1])["events"]
    assert [e["occurrenceId"] for e in by_occurrence] == [occurrences[1]]
    assert len(cli.json("history", "--type", "job_created")["events"]) == 2
    human = cli.ok("history", "--limit", "2")
    assert "occurrence_enqueued" in human.out and f"older: add --before {ids[2]}" in human.err
    assert cli.ok("history", "--type", "nothing_like_this").out.strip() == "no events"
    cli("history", "--limit", "0").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)
    cli("history", "--limit", "5000").assert_one_line_error("SCHEDULER_INVALID_ARGUMENT", 2)


class Writer:
    """An injected sleep: each call writes new events, and after ``polls`` calls it is Ctrl-C."""

    def __init__(self, cli, polls):
        self.cli = cli
        self.polls = polls
        self.calls = []

    def __call__(self, seconds):
        self.calls.append(seconds)
        if len(self.calls) > self.polls:
            raise KeyboardInterrupt
        with self.cli.open() as store:
            n = len(self.calls)
            store.enqueue_occurrence(job_id="a", scheduled_for=n, trigger_key=f"follow-{n}")
            store.enqueue_occurrence(job_id="b", scheduled_for=n, trigger_key=f"follow-{n}")


def test_follow_prints_the_tail_then_new_events_until_ctrl_c(cli):
    _setup(cli)
    writer = Writer(cli, polls=3)
    result = cli(
        "history", "--follow", "--job", "a", "--limit", "1", "--interval", "250ms", sleep=writer
    )
    assert result.code == 0, result.err
    assert writer.calls == [0.25] * 4
    lines = result.out.strip().splitlines()
    assert len(lines) == 1 + 3  # the last event of job a, then one new event per poll
    assert all(" a " in line and "occurrence_enqueued" in line for line in lines)
    assert "following new events; Ctrl-C to stop" in result.err


def test_follow_json_lines_never_repeat_or_skip(cli):
    _setup(cli)
    writer = Writer(cli, polls=4)
    result = cli("--json", "history", "-f", "--limit", "2", sleep=writer)
    assert result.code == 0
    events = [json.loads(line) for line in result.out.splitlines()]
    ids = [e["eventId"] for e in events]
    assert ids == sorted(set(ids))
    assert len(events) == 2 + 4 * 2
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # consecutive: nothing skipped


def test_follow_an_empty_filter_starts_at_the_end_of_the_log(cli):
    _setup(cli)
    writer = Writer(cli, polls=1)
    result = cli("--json", "history", "--follow", "--type", "occurrence_claimed", sleep=writer)
    assert result.code == 0 and result.out == ""
    cli("history", "--follow", "--before", "3").assert_one_line_error(
        "SCHEDULER_INVALID_ARGUMENT", 2
    )


def test_audit_lists_removed_jobs_with_their_actor(cli):
    with cli.open() as store:
        store.create_job(id="gone", kind="k", authority=AUTHORITY)
    cli.ok("--actor", "ops:hal", "job", "remove", "gone", "--reason", "retired", "--yes")
    [record] = cli.json("audit")["records"]
    assert set(record) == {"auditId", "occurredAt", "action", "actor", "subject", "data"}
    assert (record["action"], record["actor"], record["subject"]) == (
        "job_removed",
        "ops:hal",
        "gone",
    )
    assert record["data"]["reason"] == "retired"
    assert "reason=retired" in cli.ok("audit").out
    assert cli.json("audit", "--before", str(record["auditId"]))["records"] == []
