"""Every page over HTTP (Starlette's TestClient): what it shows, its filters and paging, and
the error pages for bad ids (404) and bad filters (400)."""

from __future__ import annotations

import json
import re

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import jobledger
from jobledger.errors import InvalidArgument, StoreNotFound
from jobledger.planning.explain import explain
from jobledger.web import WebSettings, create_app
from tests.system.web.conftest import TOKEN, USERS
from tests.system.web.helpers import BEARER, HTML, JSON, cell, client_for, csrf_of


@pytest.fixture
def store(sqlite_seeded):
    return sqlite_seeded[0].store


@pytest.fixture
def made(sqlite_seeded):
    return sqlite_seeded[1]


@pytest.fixture
def client(store):
    with client_for(store) as client:
        client.headers.update(BEARER)
        yield client


def test_overview_counts_match_the_store(client, store):
    response = client.get("/")
    assert response.status_code == 200
    html = response.text
    for row in store.count_occurrences():
        assert cell(html, row.kind, row.status) == str(row.count)
    assert 'data-testid="total-dead_letter"' in html
    assert html.count("<svg") == 2  # the two charts, server-rendered
    assert "worker-7f3a:host-a" in html.replace("<wbr>", "")  # ids break at punctuation
    assert re.search(r"<b data-testid=\"hour-settled\">(\d+)</b>", html)


def test_capped_counts_read_at_least(client, store, monkeypatch):
    """Counts stop at COUNT_CAP; the overview and the dead-letter page mark a stopped count."""
    from jobledger.web import pages, views

    monkeypatch.setattr(views, "COUNT_CAP", 1)
    monkeypatch.setattr(pages, "COUNT_CAP", 1)
    html = client.get("/").text
    capped = [row for row in store.count_occurrences(cap=1) if row.capped]
    assert capped
    for row in capped:
        assert re.search(
            rf'data-kind="{re.escape(row.kind)}" data-status="{row.status}">(?:<a [^>]*>)?≥1<',
            html,
        ), (row.kind, row.status)
    dead = client.get("/dead-letters").text
    total = sum(1 for row in store.count_occurrences() if row.status == "dead_letter")
    shown = re.search(r'data-testid="dead-total">([^<]*)<', dead)
    assert shown is not None
    # each kind's dead letters counted up to 1: the total is a lower bound once there are any
    assert total and shown[1].startswith("≥") and int(shown[1][1:]) <= total


def test_every_read_route_answers(client, store, made):
    occurrence = made.dead_letters[0]
    for path in (
        "/",
        "/jobs",
        "/jobs/nightly-report",
        "/occurrences",
        "/occurrences?status=queued&kind=email&job=welcome-email&limit=5",
        f"/occurrences/{occurrence}",
        f"/occurrences/{made.reclaimed}",
        "/dead-letters",
        "/dead-letters?job=billing-export&limit=200",
        "/login",
        "/healthz",
        "/metrics",
    ):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:500])


def test_static_assets_are_served_from_the_package(client):
    htmx = client.get("/static/htmx.min.js")
    assert htmx.status_code == 200
    assert "javascript" in htmx.headers["content-type"]
    assert htmx.text.startswith("var htmx=")
    assert "immutable" in htmx.headers["cache-control"]
    license_text = client.get("/static/htmx.LICENSE.txt").text
    assert "Zero-Clause BSD" in license_text
    page = client.get("/").text
    assert re.search(r'src="/static/htmx\.min\.js\?v=[0-9a-f]{10}"', page)
    assert "https://" not in re.sub(r'href="https://[^"]*"', "", page)  # nothing from the net


def test_pages_carry_a_strict_content_security_policy(client):
    response = client.get("/")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy
    assert "frame-ancestors 'none'" in policy
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_explain_page_and_json(client, store):
    page = client.get("/jobs/nightly-report").text
    assert "at 02:30 every day (America/New_York)" in page
    assert "Thu 02:30 EST" in page  # next fires also in the schedule's own zone
    answer = client.get("/jobs/nightly-report?format=json", headers=JSON)
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json() == json.loads(
        json.dumps(explain(store, "nightly-report", count=10).to_dict())
    )


def test_jobs_page_shows_schedules_and_pages(client, store):
    page = client.get("/jobs").text
    assert "every 15 minutes" in page
    assert "enqueued by callers" in page
    assert "paused while disabled" not in page  # legacy-cleanup has no schedule
    for index in range(60):
        store.create_job(
            id=f"bulk-{index:02d}",
            kind="email",
            authority={"principal": {"type": "user", "id": "t"}},
        )
    first = client.get("/jobs").text
    assert first.count('<tr data-job="') == 50
    link = re.search(r'href="/jobs\?after=([^"]+)">Next page', first)
    assert link
    second = client.get(f"/jobs?after={link.group(1)}").text
    assert second.count('<tr data-job="') == 65 - 50
    assert "First page" in second


def test_job_ids_with_slashes_and_spaces_round_trip(client, store):
    store.create_job(
        id="reports/daily run", kind="email", authority={"principal": {"type": "user", "id": "t"}}
    )
    jobs = client.get("/jobs").text
    assert 'href="/jobs/reports%2Fdaily%20run"' in jobs
    page = client.get("/jobs/reports%2Fdaily%20run")
    assert page.status_code == 200
    assert "reports/daily run" in page.text


def test_occurrences_filter_and_page_with_the_cursor(client, store):
    total = sum(row.count for row in store.count_occurrences())
    seen: list[str] = []
    url = "/occurrences?limit=10"
    pages = 0
    while url:
        html = client.get(url).text
        rows = re.findall(r'<tr data-occurrence="([^"]+)"', html)
        assert len(rows) <= 10
        seen += rows
        pages += 1
        older = re.search(r'href="(/occurrences\?[^"]*cursor=[^"]*)" data-testid="older"', html)
        url = older.group(1).replace("&amp;", "&") if older else None
        if pages > 1:
            assert "hx-trigger" not in html  # only the newest page refreshes itself
    assert len(seen) == len(set(seen)) == total
    assert pages == -(-total // 10)
    dead = client.get("/occurrences?status=dead_letter").text
    assert len(re.findall(r'<tr data-occurrence="', dead)) == 3
    by_kind = client.get("/occurrences?kind=sync&limit=200").text
    expected = sum(r.count for r in store.count_occurrences() if r.kind == "sync")
    assert len(re.findall(r'<tr data-occurrence="', by_kind)) == expected


def test_occurrences_live_refresh_uses_htmx_polling(client):
    page = client.get("/occurrences?status=queued").text
    assert 'hx-trigger="every 5s"' in page
    assert 'hx-get="/occurrences?status=queued"' in page
    paused = client.get("/occurrences?status=queued&live=0").text
    assert "hx-trigger" not in paused
    assert "resume live updates" in paused


def test_occurrence_page_shows_the_timeline(client, made):
    html = client.get(f"/occurrences/{made.reclaimed}").text
    events = re.findall(r'data-event="([a-z_]+)"', html)
    assert events == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_reclaimed",
        "occurrence_succeeded",
    ]
    assert "Reclaimed after the previous lease expired" in html
    cancelled = client.get(f"/occurrences/{made.cancelled}").text
    assert "web:alice" in cancelled and "bad address" in cancelled


def test_long_timelines_fold_renewals_and_page(client, store, clock):
    occurrence = store.enqueue_occurrence(
        job_id="welcome-email", scheduled_for=clock(), trigger_key="t:renew"
    )
    claimed = store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w1", lease_ms=60_000)
    for _ in range(250):
        store.renew(
            occurrence_id=occurrence.id, owner_id="w1", fence=claimed.fence, lease_ms=60_000
        )
    html = client.get(f"/occurrences/{occurrence.id}").text
    assert "Lease renewed ×" in html
    older = re.search(r'href="(/occurrences/[^"?]+\?before=\d+)">← Older events', html)
    assert older
    first_page = client.get(older.group(1)).text
    assert "Enqueued" in first_page and "Claimed" in first_page


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/occurrences/occ_does_not_exist", 404),
        ("/jobs/no-such-job", 404),
        ("/jobs/no-such-job?format=json", 404),
        ("/no/such/page", 404),
        ("/occurrences?status=finished", 400),
        ("/occurrences?limit=0", 400),
        ("/occurrences?limit=lots", 400),
        ("/occurrences?limit=201", 400),
        ("/occurrences?cursor=not-a-cursor", 400),
        ("/occurrences?job=%01bad", 400),
        ("/dead-letters?limit=9999", 400),
        ("/jobs?after=%7F", 400),
    ],
)
def test_errors_are_pages_that_say_what_to_do(client, made, path, status):
    response = client.get(path)
    assert response.status_code == status, response.text[:300]
    assert 'data-testid="error"' in response.text
    assert "<h1>" in response.text
    as_json = client.get(path, headers=JSON)
    assert as_json.status_code == status
    assert set(as_json.json()) == {"error", "message"}


def test_bad_before_event_id_is_400(client, made):
    response = client.get(f"/occurrences/{made.reclaimed}?before=abc")
    assert response.status_code == 400


def test_wrong_method_is_405(client):
    assert client.post("/occurrences", data={}).status_code == 405


def test_metrics_route_exposes_store_gauges(client, store):
    text = client.get("/metrics", headers={"accept": "text/plain"}).text
    for row in store.count_occurrences():
        line = (
            f'jobledger_occurrences{{kind="{row.kind}",status="{row.status}"}} {float(row.count)}'
        )
        assert line in text
    assert 'jobledger_leases_held{owner="worker-7f3a:host-a"} 1.0' in text
    assert "jobledger_store_up 1.0" in text


def test_metrics_can_be_turned_off(store):
    with client_for(store, metrics=False) as client:
        client.headers.update(BEARER)
        assert client.get("/metrics").status_code == 404
        assert "/metrics" not in client.get("/").text


def test_mounted_under_a_prefix_links_and_cookies_follow(store):
    inner = create_app(store, WebSettings(basic_auth=USERS, token=TOKEN, secret_key="k" * 20))
    outer = Starlette(routes=[Mount("/ops/jobs", app=inner)])
    with TestClient(outer, headers=HTML, follow_redirects=False) as client:
        redirect = client.get("/ops/jobs/dead-letters")
        assert redirect.status_code == 303
        assert redirect.headers["location"] == "/ops/jobs/login?next=%2Fops%2Fjobs%2Fdead-letters"
        login = client.post(
            "/ops/jobs/login",
            data={"user": "alice", "password": USERS["alice"], "next": "/elsewhere"},
        )
        assert login.headers["location"] == "/ops/jobs/"  # outside the mount: refused
        assert "Path=/ops/jobs" in login.headers["set-cookie"]
        page = client.get("/ops/jobs/").text
        assert 'href="/ops/jobs/jobs"' in page
        assert 'src="/ops/jobs/static/htmx.min.js' in page
        assert client.get("/ops/jobs/static/app.css").status_code == 200


def test_create_app_from_a_path_opens_without_migrating_and_closes(tmp_path, store):
    with pytest.raises(StoreNotFound):
        create_app(tmp_path / "missing.sqlite3", WebSettings(read_only=True))
    path = tmp_path / "ok.sqlite3"
    jobledger.open_store(path).close()
    app = create_app(str(path), WebSettings(read_only=True))
    with TestClient(app, headers=HTML) as client:
        assert client.get("/").status_code == 200
    dash = app.app.state.dashboard
    with pytest.raises(jobledger.StoreClosed):
        dash.store.now()


def test_settings_are_validated(store):
    with pytest.raises(InvalidArgument, match="needs credentials"):
        WebSettings()
    with pytest.raises(InvalidArgument, match="at least 16"):
        WebSettings(token="short")
    with pytest.raises(InvalidArgument, match="basic_auth"):
        WebSettings(basic_auth=["alice"])
    with pytest.raises(InvalidArgument, match="':'"):
        WebSettings(basic_auth={"a:b": "pw"})
    with pytest.raises(InvalidArgument):
        WebSettings(token=TOKEN, title="")
    with pytest.raises(InvalidArgument, match="login_link makes its own token"):
        WebSettings(token=TOKEN, login_link=True)
    with pytest.raises(InvalidArgument):
        create_app(42, WebSettings(token=TOKEN))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="WebSettings"):
        create_app(store, {"token": TOKEN})  # type: ignore[arg-type]
    assert WebSettings(basic_auth=("bob", "pw")).basic_auth == {"bob": "pw"}  # one pair is fine
    assert len(WebSettings(login_link=True).token or "") >= 16  # made for this run


def test_an_unavailable_store_is_a_503_page(store, monkeypatch):
    def broken(*args, **kwargs):
        raise jobledger.StorageUnavailable(
            "database is locked", details={"commitState": "not_committed"}
        )

    with client_for(store) as client:
        client.headers.update(BEARER)
        monkeypatch.setattr(store, "count_occurrences", broken)
        response = client.get("/")
        assert response.status_code == 503
        assert "Try again" in response.text


def test_html_escapes_stored_text(client, store):
    store.create_job(
        id="<script>alert(1)</script>",
        kind="email",
        authority={"principal": {"type": "user", "id": "t"}},
        payload={"html": "<img src=x onerror=alert(1)>"},
    )
    jobs = client.get("/jobs").text
    assert "<script>alert(1)</script>" not in jobs
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in jobs
    page = client.get("/jobs/%3Cscript%3Ealert(1)%3C%2Fscript%3E").text
    assert "<img src=x" not in page


def test_only_the_static_mount_is_cached_and_every_page_is_no_store(store):
    """A job id holding ``/static/`` is a page like any other: with the session's CSRF token in
    it, it must never be cached (it once was, for a week, as ``immutable``)."""
    store.create_job(
        id="reports/static/daily",
        kind="email",
        authority={"principal": {"type": "user", "id": "t"}},
    )
    with client_for(store) as client:
        assert client.get("/login").headers["cache-control"] == "no-store"
        signed_in = client.post("/login", data={"user": "alice", "password": USERS["alice"]})
        assert signed_in.headers["cache-control"] == "no-store"
        page = client.get("/jobs/reports%2Fstatic%2Fdaily")
        assert page.status_code == 200 and 'name="csrf_token"' in page.text
        assert page.headers["cache-control"] == "no-store"
        for path in ("/", "/jobs", "/occurrences?job=reports/static/daily", "/jobs/static/x"):
            assert client.get(path).headers["cache-control"] == "no-store", path
        missing = client.get("/static/no-such-file.css")
        assert missing.status_code == 404
        assert missing.headers["cache-control"] == "no-store"
        asset = client.get("/static/app.css")
        assert asset.headers["cache-control"] == "public, max-age=604800, immutable"
        out = client.post("/logout", data={"csrf_token": csrf_of(page.text)})
        assert out.headers["cache-control"] == "no-store"


def test_static_caching_follows_the_mount_point(store):
    store.create_job(
        id="a/static/b", kind="email", authority={"principal": {"type": "user", "id": "t"}}
    )
    inner = create_app(store, WebSettings(token=TOKEN, secret_key="k" * 20))
    outer = Starlette(routes=[Mount("/static", app=inner)])  # mounted at a path named static
    with TestClient(outer, headers={**HTML, **BEARER}, follow_redirects=False) as client:
        for path in ("/static/", "/static/jobs", "/static/jobs/a%2Fstatic%2Fb"):
            response = client.get(path)
            assert response.status_code == 200, path
            assert response.headers["cache-control"] == "no-store", path
        asset = client.get("/static/static/app.css")
        assert asset.status_code == 200
        assert "immutable" in asset.headers["cache-control"]


def test_an_occurrence_is_found_by_a_unique_start_of_its_id(client, store, made):
    whole = made.reclaimed
    for start in (whole[:12], whole[4:14], whole[:20].upper()):
        response = client.get(f"/occurrences/{start}?before=5", follow_redirects=False)
        assert response.status_code == 303, response.text[:300]
        assert response.headers["location"] == f"/occurrences/{whole}?before=5"
    page = client.get(f"/occurrences/{whole[:12]}", follow_redirects=True)
    assert page.status_code == 200 and whole in page.text
    # The "open an occurrence" box on the occurrences page.
    assert 'data-testid="open-occurrence"' in client.get("/occurrences").text
    opened = client.get("/occurrences", params={"id": " " + whole[4:16]}, follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == f"/occurrences/{whole}"


def test_an_ambiguous_start_of_an_id_names_the_candidates(client, store):
    # Two firings whose ids share nine hex digits: occ_b858a7b159… and occ_b858a7b156….
    store.create_job(id="j", kind="email", authority={"principal": {"type": "user", "id": "t"}})
    first, second = (
        store.enqueue_occurrence(job_id="j", scheduled_for=1_767_225_600_000, trigger_key=key)
        for key in ("k-180661", "k-32484")
    )
    for path in ("/occurrences/b858a7b15", "/occurrences?id=occ_b858a7b1"):
        response = client.get(path)
        assert response.status_code == 400
        assert (
            'data-testid="error"' in response.text and "More than one occurrence" in response.text
        )
        assert f"{second.id[:16]}…" in response.text and f"{first.id[:16]}…" in response.text
    found = client.get("/occurrences/b858a7b159", follow_redirects=True)
    assert found.status_code == 200 and first.id in found.text
    for path, status in (
        ("/occurrences/00000000", 404),
        ("/occurrences?id=00000000", 404),
        ("/occurrences/b858a7b", 404),  # too short to be a start of an id
        ("/occurrences?id=nonsense", 404),
    ):
        response = client.get(path)
        assert response.status_code == status, (path, response.text[:300])
        assert 'data-testid="error"' in response.text


def test_a_stored_lone_surrogate_is_shown_as_its_escape(client, store, clock):
    # SPEC §2 "Text": a payload may hold one; the page (UTF-8) shows its escape
    occurrence = store.enqueue_occurrence(
        job_id="welcome-email",
        scheduled_for=clock(),
        trigger_key="t:lone",
        payload={"note": "a" + chr(0xD800) + "b"},
    )
    page = client.get(f"/occurrences/{occurrence.id}")
    assert page.status_code == 200
    assert "a\\ud800b" in page.text
