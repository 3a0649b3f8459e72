"""The dashboard's pure parts: charts, the timeline, formatting, signing, and import hygiene."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from jobledger.models import Event, ThroughputBucket
from jobledger.testing import FakeClock
from jobledger.web import charts, formatting
from jobledger.web.limits import BackOff, client_key
from jobledger.web.security import Guard, Identity
from jobledger.web.sessions import SessionRegistry
from jobledger.web.settings import WebSettings
from jobledger.web.timeline import build_timeline

NOW = 1_767_229_305_000  # 2026-01-01 01:01:45 UTC
MINUTE = 60_000


def test_importing_jobledger_never_imports_the_optional_packages():
    code = (
        "import sys, jobledger, jobledger.testing, jobledger.engine.observe, jobledger.cli\n"
        "heavy = ('starlette', 'jinja2', 'uvicorn', 'prometheus_client', 'multipart',"
        " 'jobledger.web', 'jobledger.metrics')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_window_is_sixty_whole_minutes_ending_now():
    since = charts.window(NOW)
    assert since == NOW // MINUTE * MINUTE - 59 * MINUTE
    assert (NOW - since) // MINUTE == 59


def test_per_minute_adds_kinds_and_fills_gaps():
    since = charts.window(NOW)
    buckets = [
        ThroughputBucket(since, "a", 2, 1, 0),
        ThroughputBucket(since, "b", 1, 0, 1),
        ThroughputBucket(since + 5 * MINUTE, "a", 0, 0, 3),
    ]
    minutes = charts.per_minute(buckets, since)
    assert len(minutes) == 60
    assert minutes[0] == charts.Minute(since, 3, 1, 1)
    assert minutes[0].failure_rate == pytest.approx(0.4)
    assert minutes[1].total == 0 and minutes[1].failure_rate is None
    assert minutes[5].dead_lettered == 3


def test_failure_bins_follow_clock_five_minutes():
    since = charts.window(NOW)  # 00:02
    minutes = charts.per_minute(
        [ThroughputBucket(since, "a", 1, 1, 0), ThroughputBucket(since + 3 * MINUTE, "a", 2, 0, 0)],
        since,
    )
    bins = charts.failure_bins(minutes)
    assert bins[0] == (since, since + 3 * MINUTE, 1, 2)  # 00:02–00:05, cut by the window
    assert bins[1][0] == since + 3 * MINUTE and bins[1][2:] == (0, 2)
    assert sum(total for *_, total in bins) == 4


def test_charts_are_escaped_svg_with_titles():
    since = charts.window(NOW)
    minutes = charts.per_minute([ThroughputBucket(since + MINUTE, "<b>", 4, 1, 1)], since)
    svg = str(charts.throughput_chart(minutes))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<title>00:03 UTC — 4 succeeded, 1 retried, 1 dead-lettered</title>" in svg
    assert svg.count("<rect") == 3
    assert 'aria-label="Settlements per minute over the last 60 minutes: 6 in all' in svg
    assert "style=" not in svg  # the CSP forbids inline styles
    rate = str(charts.failure_chart(minutes))
    assert "33.3% failed (2 of 6)" in rate
    empty = str(charts.throughput_chart(charts.per_minute([], since)))
    assert "no settlements in this hour" in empty


def test_nice_ceiling_gives_whole_quarter_lines():
    assert charts._nice_ceiling(0) == 4
    assert charts._nice_ceiling(5) == 8
    assert charts._nice_ceiling(13) == 16
    assert charts._nice_ceiling(81) == 120
    assert charts._nice_ceiling(7, steps=(5, 10, 20, 25, 50)) == 10


def test_formatting():
    assert formatting.utc(0) == "1970-01-01 00:00:00 UTC"
    assert formatting.iso(1_500) == "1970-01-01T00:00:01.500Z"
    assert formatting.duration(250) == "250 ms"
    assert formatting.duration(61_000) == "1 min 1 s"
    assert formatting.duration(3_600_000 * 26) == "1 d 2 h"
    assert formatting.age(NOW - 90_000, NOW) == "1 min 30 s ago"
    assert formatting.age(NOW + 7_200_000, NOW) == "in 2 h"
    assert formatting.age(NOW, NOW) == "just now"
    assert formatting.local_time(1_767_252_600_000, "America/New_York") == "Thu 02:30 EST"
    assert formatting.short_id("occ_" + "a" * 60) == "occ_aaaaaaaaaaaa…"
    assert str(formatting.badge("<x>")) == '<span class="badge badge-&lt;x&gt;">&lt;x&gt;</span>'
    assert formatting.pretty_json({"n": 2**60}) == '{\n  "n": 1152921504606846976\n}'


def event(
    event_id: int, kind: str, owner: str | None = "w1", fence: int | None = 1, **data
) -> Event:
    return Event(event_id, "job", "occ", kind, 1000 * event_id, owner, fence, data)


def test_timeline_folds_renewals_of_one_lease():
    events = [
        event(1, "occurrence_enqueued", None, None, scheduledFor=0),
        event(2, "occurrence_claimed", attempt=1, previousOwner=None),
        *[event(3 + i, "occurrence_renewed", leaseExpiresAt=60_000 + i) for i in range(5)],
        event(8, "occurrence_reclaimed", "w2", 2, attempt=2, previousOwner="w1"),
        event(9, "occurrence_renewed", "w2", 2, leaseExpiresAt=99),
        event(10, "occurrence_requeued", None, 2, actor="web:alice", reason="why not"),
    ]
    entries = build_timeline(reversed(events))
    assert [entry.type for entry in entries] == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_renewed",
        "occurrence_reclaimed",
        "occurrence_renewed",
        "occurrence_requeued",
    ]
    folded = entries[2]
    assert folded.count == 5 and folded.title == "Lease renewed ×5"
    assert folded.first.event_id == 3 and folded.last.event_id == 7
    assert folded.details[0].instant == 60_004
    assert [d.label for d in entries[1].details] == ["attempt"]  # no "previous owner: None"
    requeue = entries[-1]
    assert requeue.tone == "operator"
    assert [(d.label, d.text, d.emphasis) for d in requeue.details] == [
        ("by", "web:alice", True),
        ("reason", "why not", True),
    ]


def test_sessions_and_flash_are_signed():
    clock = FakeClock(0)
    settings = WebSettings(
        token="t" * 20, secret_key="s" * 20, clock=clock, session_ttl=timedelta(minutes=5)
    )
    guard = Guard(settings)
    value, identity = guard.new_session("token")
    assert guard.read_session(value) == identity
    assert guard.read_session(value + "x") is None
    assert guard.read_session("garbage") is None
    assert guard.read_session("a.b.c") is None
    other = Guard(WebSettings(token="t" * 20, secret_key="z" * 20, clock=clock))
    assert other.read_session(value) is None
    clock.advance(timedelta(minutes=5))
    assert guard.read_session(value) is None
    notes = [{"level": "success", "text": "done"}, {"level": "evil", "text": "x"}]
    assert guard.decode_flash(guard.encode_flash(notes)) == [
        {**notes[0], "occurrences": [], "more": 0}
    ]
    linked = [{"level": "success", "text": "x", "occurrences": ["occ_1", 2], "more": "3"}]
    assert guard.decode_flash(guard.encode_flash(linked)) == [
        {"level": "success", "text": "x", "occurrences": ["occ_1"], "more": 0}
    ]
    assert guard.decode_flash(other.encode_flash(notes)) == []  # another key: not ours
    assert guard.decode_flash("forged.value") == []


def test_csrf_rules():
    assert Guard.csrf_ok(Identity("token", "bearer"), None)
    assert not Guard.csrf_ok(Identity(None, "anonymous"), "x")
    assert not Guard.csrf_ok(Identity("alice", "session", "abc"), None)
    assert not Guard.csrf_ok(Identity("alice", "session", "abc"), "abd")
    assert Guard.csrf_ok(Identity("alice", "session", "abc"), "abc")


def test_session_registry_ends_expires_and_stays_bounded():
    clock = FakeClock(0)
    registry = SessionRegistry(clock, ttl_ms=60_000, limit=3)
    first, session = registry.open("alice")
    assert registry.get(first) == session and session.expires_at == 60_000
    registry.end(first)
    assert registry.get(first) is None
    ids = [registry.open(f"user{index}")[0] for index in range(4)]
    assert len(registry) == 3 and registry.get(ids[0]) is None  # the oldest made room
    clock.advance(60_000)
    assert registry.get(ids[-1]) is None  # expired
    registry.open("bob")
    assert len(registry) == 1  # expired sessions are dropped as new ones open


def test_back_off_doubles_to_its_cap_resets_and_forgets():
    clock = FakeClock(0)
    back_off = BackOff(
        clock,
        first=timedelta(seconds=1),
        cap=timedelta(seconds=5),
        reset=timedelta(minutes=1),
        limit=4,
    )
    a = ("192.0.2.1", "alice")
    assert back_off.wait_ms(a) == 0
    assert [back_off.failed(a) for _ in range(5)] == [1_000, 2_000, 4_000, 5_000, 5_000]
    assert back_off.wait_ms(a) == 5_000
    clock.advance(3_000)
    assert back_off.wait_ms(a) == 2_000
    assert back_off.wait_ms(("192.0.2.1", "bob")) == 0  # other names from the same address
    assert back_off.wait_ms(("192.0.2.2", "alice")) == 0  # the same name from elsewhere
    back_off.succeeded(a)
    assert back_off.wait_ms(a) == 0 and back_off.failed(a) == 1_000  # a success clears it
    clock.advance(60_000)
    assert back_off.failed(a) == 1_000  # quiet for the reset: from the first wait again
    for name in "bcd":
        back_off.failed(("192.0.2.1", name))
    back_off.failed(("192.0.2.1", "e"))
    assert len(back_off) == 4 and back_off.wait_ms(a) == 0  # the least recent was forgotten
    clock.advance(60_000)
    back_off.failed(("192.0.2.1", "f"))
    assert len(back_off) == 1  # pairs past their reset are dropped when the table is full
    assert back_off.failed(("x", "y" * 10)) == 1_000
    big = BackOff(clock, first=timedelta(seconds=1), cap=timedelta(minutes=1))
    for _ in range(200):  # the exponent never overflows past the cap
        assert big.failed(a) <= 60_000


def test_client_keys_group_an_ipv6_machine():
    assert client_key("192.0.2.1") == "192.0.2.1"
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff:1") == "2001:db8::/64"
    assert client_key("2001:db8:0:1::1") != client_key("2001:db8::1")
    assert client_key("::ffff:192.0.2.1") == "192.0.2.1"
    assert client_key(None) == "unknown"
    assert client_key("testclient") == "testclient"


def test_identifiers_break_at_their_punctuation_and_stay_escaped():
    assert (
        str(formatting.breakable("reports/daily_run:v2")) == "reports/<wbr>daily_<wbr>run:<wbr>v2"
    )
    assert str(formatting.breakable("<b>/x")) == "&lt;b&gt;/<wbr>x"
    assert str(formatting.breakable("welcome-email")) == "welcome-email"  # breaks after - anyway


# -- the overview with many kinds -----------------------------------------------------------------


def test_shown_kinds_are_all_kinds_until_the_limit_then_the_busiest():
    from jobledger.web.views import shown_kinds

    counts = {
        ("b", "succeeded"): 9,
        ("a", "queued"): 1,
        ("c", "dead_letter"): 2,
        ("d", "running"): 3,
        ("e", "succeeded"): 10,
    }
    assert shown_kinds(counts, limit=5) == ["a", "b", "c", "d", "e"]  # by name, all of them
    assert shown_kinds(counts, limit=2) == ["a", "d"]  # the most live work
    assert shown_kinds(counts, limit=3) == ["a", "c", "d"]  # then dead letters
    assert shown_kinds(counts, limit=4) == ["a", "c", "d", "e"]  # then occurrences


def test_the_overview_of_two_thousand_kinds_stays_one_small_page(tmp_path):
    import re

    import jobledger
    from jobledger.web import views
    from tests.system.web.helpers import BEARER, client_for

    authority = {"principal": {"type": "user", "id": "web"}}
    with jobledger.open_store(tmp_path / "db" / "kinds.sqlite3", clock=FakeClock(NOW)) as store:
        requests = []
        for index in range(2_000):
            job = f"job-{index:04}"
            store.create_job(id=job, kind=f"kind-{index:04}", authority=authority)
            requests += [
                jobledger.EnqueueRequest(job_id=job, scheduled_for=NOW - index, trigger_key=f"{n}")
                for n in range(1 + index % 5)
            ]
        store.enqueue_batch(requests)
        data = views.overview(store)
        with client_for(store) as client:
            page = client.get("/", headers=BEARER)
    assert data.kind_count == 2_000 and len(data.kinds) == views.KINDS_SHOWN
    assert data.more_kinds == 1_950
    # The 50 shown are among the 400 with the most queued (5 each); the rest is one row.
    assert all(int(kind.split("-")[1]) % 5 == 4 for kind in data.kinds)
    assert data.totals["queued"] == len(requests)
    assert data.more_counts["queued"] == len(requests) - 5 * views.KINDS_SHOWN
    assert len(data.oldest_due) == views.OLDEST_DUE_SHOWN and data.more_due == 1_980
    assert data.oldest_due[0].kind == "kind-1999"  # due longest
    assert page.status_code == 200
    html = page.text
    assert len(page.content) < 150_000, len(page.content)
    assert "2000 kinds" in html
    assert re.search(r'data-testid="more-kinds">\s*<td><a href="[^"]*">and 1950 more kinds<', html)
    assert "and 1980 more kinds with due work" in html
    assert html.count('data-status="queued"') == views.KINDS_SHOWN
