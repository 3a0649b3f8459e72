"""End to end in a real headless browser (Debian's chromium via Playwright), on SQLite and
PostgreSQL: sign in, read every page, requeue from the dead-letters page and watch the
occurrence run again, and check that actions are refused without a session, without the CSRF
token and in read-only mode. Screenshots of every page go to ``tests/system/web/artifacts/``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import quote

import pytest

from jobledger.testing import run_until_idle
from jobledger.web import WebSettings, create_app
from tests.system.web.conftest import BROWSER_MISSING, TOKEN, USERS, screenshot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or ""),
]

SECRET = "browser-test-secret-key-0123456789"


def dashboard(app, **options):
    options.setdefault("basic_auth", USERS)
    options.setdefault("token", TOKEN)
    options.setdefault("secret_key", SECRET)
    return create_app(app.store, WebSettings(**options))


def sign_in(page, base, user="alice"):
    page.goto(f"{base}/")
    assert "/login" in page.url  # reads need a sign-in by default
    page.fill("input[name=user]", user)
    page.fill("input[name=password]", USERS[user])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    assert page.inner_text("[data-testid=user]") == user


def test_every_page_renders_what_the_store_holds(seeded, serve_app, browser_page, backend):
    app, made = seeded
    server = serve_app(dashboard(app))
    page, base = browser_page, server.url

    page.goto(f"{base}/login")
    screenshot(page, f"{backend}-login")
    sign_in(page, base)

    # Overview: every count cell and every total matches the store.
    counts = {(row.kind, row.status): row.count for row in app.store.count_occurrences()}
    for (kind, status), count in counts.items():
        cell = page.locator(f"[data-testid=counts] td[data-kind='{kind}'][data-status='{status}']")
        assert cell.inner_text() == str(count)
    for status in ("queued", "running", "retry_wait", "succeeded", "dead_letter", "cancelled"):
        expected = sum(n for (_, s), n in counts.items() if s == status)
        card = page.locator(f"[data-testid=total-{status}] .n")
        assert card.inner_text() == str(expected)
    settled = sum(
        b.succeeded + b.retried + b.dead_lettered
        for b in app.store.throughput(since=app.store.now() - 3_600_000)
    )
    assert int(page.inner_text("[data-testid=hour-settled]")) <= settled
    assert page.locator("svg.chart rect").count() > 10
    assert "worker-7f3a:host-a" in page.inner_text("[data-testid=workers]")
    oldest = page.inner_text("[data-testid=oldest-due]")
    assert "email" in oldest and "sync" in oldest
    screenshot(page, f"{backend}-overview", doc=True)

    page.click("nav >> text=Jobs")
    jobs = page.inner_text("[data-testid=jobs]")
    for job in ("welcome-email", "nightly-report", "sync-inventory", "billing-export"):
        assert job in jobs
    assert "at 02:30 every day (America/New_York)" in jobs
    screenshot(page, f"{backend}-jobs", doc=True)

    page.click("[data-testid=jobs] >> text=nightly-report")
    explain = page.inner_text("[data-testid=explain]")
    assert "at 02:30 every day (America/New_York)" in explain
    assert "2026-01-01 07:30:00 UTC" in explain  # 02:30 EST
    screenshot(page, f"{backend}-job", doc=True)

    page.click("nav >> text=Occurrences")
    assert page.locator("[data-testid=occurrences] tbody tr").count() == 50
    page.select_option("select[name=status]", "dead_letter")
    page.click("text=Filter")
    page.wait_for_url(re.compile(r"status=dead_letter"))
    assert page.locator("[data-testid=occurrences] tbody tr").count() == 3
    page.goto(f"{base}/occurrences")
    screenshot(page, f"{backend}-occurrences", doc=True)
    page.click("[data-testid=older]")
    assert page.locator("[data-testid=occurrences] tbody tr").count() > 0

    page.goto(f"{base}/occurrences/{made.reclaimed}")
    events = page.locator("[data-testid=timeline] li").evaluate_all(
        "items => items.map(item => item.dataset.event)"
    )
    assert events == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_reclaimed",
        "occurrence_succeeded",
    ]
    assert "runtime-gone:host-b" in page.inner_text("[data-testid=timeline]")
    screenshot(page, f"{backend}-occurrence")

    page.goto(f"{base}/dead-letters")
    assert page.locator("[data-testid=dead-letters] tbody tr").count() == 3
    screenshot(page, f"{backend}-dead-letters", doc=True)

    assert page.console_errors == []  # no CSP violation, no script error, on any page
    page.goto(f"{base}/occurrences/no-such-occurrence")
    assert "404" in page.inner_text("[data-testid=error]")


def test_the_printed_sign_in_link_signs_in_through_its_fragment(
    seeded, serve_app, browser_page, backend
):
    app, _ = seeded
    settings = WebSettings(login_link=True)  # what `jobledger web` makes with nothing configured
    server = serve_app(create_app(app.store, settings))
    page, base = browser_page, server.url
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(f"{base}/login#token={quote(settings.token or '')}")
    page.wait_for_url(f"{base}/")
    assert page.inner_text("[data-testid=user]") == "token"
    assert settings.token not in page.url
    # The token travelled only in a POST body: no URL the browser asked for carried it.
    assert requests and not [url for url in requests if settings.token in url.partition("#")[0]]
    assert page.console_errors == []


def test_requeue_from_the_dead_letters_page_runs_it_again(seeded, serve_app, browser_page, backend):
    app, made = seeded
    server = serve_app(dashboard(app))
    page, base = browser_page, server.url
    sign_in(page, base)
    target, other = made.dead_letters[0], made.dead_letters[1]
    invoice = app.store.get_occurrence(target).payload["invoice"]

    page.goto(f"{base}/dead-letters")
    button = page.locator("[data-testid=requeue]")
    assert button.is_disabled()  # nothing selected yet
    page.check(f"tr[data-occurrence='{target}'] input[type=checkbox]")
    page.check(f"tr[data-occurrence='{other}'] input[type=checkbox]")
    assert button.inner_text() == "Requeue 2 selected"
    page.fill("[data-testid=reason]", "billing API fixed in release 4.2")
    button.click()
    page.wait_for_url(f"{base}/dead-letters")
    assert "Requeued 2 dead letters as web:alice." in page.inner_text(".flash-success")
    assert page.locator("[data-testid=dead-letters] tbody tr").count() == 1
    links = page.locator(".flash-success a[data-testid=requeued]")
    assert sorted(links.evaluate_all("links => links.map(a => a.title)")) == sorted([target, other])
    screenshot(page, f"{backend}-dead-letters-requeued")
    assert app.store.get_occurrence(target).status == "retry_wait"

    made.flaky[invoice] = False  # the upstream problem is fixed: this invoice now goes through
    made.flaky[app.store.get_occurrence(other).payload["invoice"]] = False
    results = {result.occurrence.id: result.status for result in run_until_idle(app)}
    assert results[target] == "succeeded"

    page.goto(f"{base}/dead-letters")
    page.check(f"tr[data-occurrence='{made.dead_letters[2]}'] input[type=checkbox]")
    page.fill("[data-testid=reason]", "one more")
    page.locator("[data-testid=requeue]").click()
    page.wait_for_url(f"{base}/dead-letters")
    page.click(".flash-success a[data-testid=requeued]")  # straight to the requeued one
    page.wait_for_url(f"{base}/occurrences/{made.dead_letters[2]}")
    assert page.locator("[data-testid=timeline] li").last.get_attribute("data-event") == (
        "occurrence_requeued"
    )

    page.goto(f"{base}/occurrences/{target}")
    timeline = page.locator("[data-testid=timeline] li")
    events = timeline.evaluate_all("items => items.map(item => item.dataset.event)")
    assert events[-3:] == ["occurrence_requeued", "occurrence_claimed", "occurrence_succeeded"]
    requeued = timeline.nth(len(events) - 3).inner_text()
    assert "web:alice" in requeued and "billing API fixed in release 4.2" in requeued
    assert "succeeded" in page.inner_text("h1 + p")
    screenshot(page, f"{backend}-occurrence-requeued", doc=True)


def test_actions_refused_without_sign_in_or_csrf_token(seeded, serve_app, browser_page, backend):
    app, made = seeded
    server = serve_app(dashboard(app, public_reads=True))
    page, base = browser_page, server.url
    target = made.dead_letters[0]
    fence = app.store.get_occurrence(target).fence
    form = {"id": f"{target}:{fence}", "reason": "sneaky"}

    # Anonymous: the page is readable but offers no action, and a forged POST is refused.
    page.goto(f"{base}/dead-letters")
    assert page.locator("input[type=checkbox]").count() == 0
    assert "Sign in to requeue" in page.inner_text("main")
    response = page.request.post(f"{base}/dead-letters/requeue", form=form)
    assert response.status == 401

    # Signed in, but a POST without the session's CSRF token (what another site would send).
    page.goto(f"{base}/login")
    page.fill("input[name=user]", "alice")
    page.fill("input[name=password]", USERS["alice"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    response = page.request.post(f"{base}/dead-letters/requeue", form=form)
    assert response.status == 403
    forged = page.request.post(
        f"{base}/dead-letters/requeue", form={**form, "csrf_token": "0" * 32}
    )
    assert forged.status == 403
    assert app.store.get_occurrence(target).status == "dead_letter"
    assert not app.store.events(occurrence_id=target, event_type="occurrence_requeued")


def test_read_only_mode_hides_and_refuses_actions(seeded, serve_app, browser_page, backend):
    app, made = seeded
    # No credentials: open reads.
    server = serve_app(create_app(app.store, WebSettings(read_only=True)))
    page, base = browser_page, server.url
    page.goto(f"{base}/dead-letters")
    assert page.inner_text(".badge-readonly") == "read-only"
    assert page.locator("input[type=checkbox]").count() == 0
    assert page.locator("form[method=post]").count() == 0
    page.goto(f"{base}/jobs")
    assert page.locator("form[method=post]").count() == 0
    page.goto(f"{base}/occurrences/{made.running}")
    assert page.locator("[data-testid=actions]").count() == 0
    screenshot(page, f"{backend}-read-only-occurrence")
    target = made.dead_letters[0]
    response = page.request.post(
        f"{base}/dead-letters/requeue",
        form={"id": f"{target}:1", "reason": "x"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert response.status == 403
    assert app.store.get_occurrence(target).status == "dead_letter"


def test_disable_a_job_and_cancel_an_occurrence(seeded, serve_app, browser_page, backend):
    app, made = seeded
    server = serve_app(dashboard(app))
    page, base = browser_page, server.url
    sign_in(page, base)
    page.on("dialog", lambda dialog: dialog.accept())

    page.goto(f"{base}/jobs")
    page.click("[data-testid='toggle-sync-inventory']")
    page.wait_for_url(f"{base}/jobs")
    assert "Disabled sync-inventory as web:alice." in page.inner_text(".flash-success")
    assert app.store.get_job("sync-inventory").enabled is False
    [update] = app.store.events(job_id="sync-inventory", event_type="job_updated")
    assert update.data["actor"] == "web:alice"
    assert "paused while disabled" in page.inner_text("tr[data-job='sync-inventory']")

    page.goto(f"{base}/occurrences/{made.running}")
    page.fill("input[name=reason]", "customer asked us to stop")
    page.click("text=Cancel occurrence")
    page.wait_for_url(f"{base}/occurrences/{made.running}")
    assert app.store.get_occurrence(made.running).status == "cancelled"
    last = page.locator("[data-testid=timeline] li").last
    assert last.get_attribute("data-event") == "occurrence_cancelled"
    assert "web:alice" in last.inner_text() and "customer asked us to stop" in last.inner_text()


def test_occurrences_refresh_live(seeded, serve_app, browser_page, backend):
    app, _ = seeded

    server = serve_app(dashboard(app, refresh=timedelta(seconds=1)))
    page, base = browser_page, server.url
    sign_in(page, base)
    page.goto(f"{base}/occurrences?job=welcome-email")
    fresh = app.enqueue("welcome-email", payload={"to": "live@example.com"})
    page.wait_for_selector(f"tr[data-occurrence='{fresh.id}']", timeout=10_000)
    assert page.url == f"{base}/occurrences?job=welcome-email"  # swapped in place, no reload
    assert page.console_errors == []


LONG_JOB = "reports/static/daily-revenue-reconciliation-for-every-region-and-currency"
LAYOUT_PAGES = ["overview", "jobs", "job", "occurrences", "occurrence", "dead-letters"]


@pytest.mark.parametrize("width", [420, 1280])
def test_pages_fit_the_viewport_and_identifiers_wrap_sensibly(
    seeded, serve_app, browser_page, backend, width, clock
):
    """No page scrolls sideways (wide tables scroll inside their panel), a long job id wraps
    at its punctuation into a few lines, not one letter per line, and the explain page's
    "Skipped runs" stands apart from the facts above it."""
    app, made = seeded
    app.store.create_job(
        id=LONG_JOB, kind="email", authority={"principal": {"type": "user", "id": "t"}}
    )
    occurrence = app.enqueue(LONG_JOB, payload={"to": "wide@example.com"})
    app.schedule("minutely-digest", "email", every=timedelta(minutes=1), misfire="skip")
    app.plan()
    clock.advance(timedelta(minutes=10))  # the planner was away: nine slots skipped
    app.plan()
    server = serve_app(dashboard(app))
    page, base = browser_page, server.url
    page.set_viewport_size({"width": width, "height": 860})
    page.goto(f"{base}/login")
    assert_fits(page, width, "login")
    sign_in(page, base)
    paths = {
        "overview": "/",
        "jobs": "/jobs",
        "job": f"/jobs/{quote(LONG_JOB, safe='')}",
        "occurrences": "/occurrences",
        "occurrence": f"/occurrences/{occurrence.id}",
        "dead-letters": "/dead-letters",
    }
    for name in LAYOUT_PAGES:
        page.goto(base + paths[name])
        assert_fits(page, width, name)
        screenshot(page, f"{backend}-{width}px-{name}")
    page.goto(f"{base}/jobs")
    assert lines_of(page, f"tr[data-job='{LONG_JOB}'] td:first-child a") <= 4
    page.goto(f"{base}/occurrences")
    assert lines_of(page, f"tr[data-occurrence='{occurrence.id}'] td:nth-child(2) a") <= 4
    page.goto(base + paths["job"])
    assert lines_of(page, "h1") <= 4
    page.goto(f"{base}/jobs/minutely-digest")
    assert_fits(page, width, "skipped runs")
    gap = page.evaluate(
        """() => {
            const heading = [...document.querySelectorAll("[data-testid=explain] h2")]
                .find(h2 => h2.textContent.trim() === "Skipped runs");
            const facts = document.querySelector("[data-testid=explain] dl.facts");
            return heading.getBoundingClientRect().top - facts.getBoundingClientRect().bottom;
        }"""
    )
    assert gap >= 16, gap
    screenshot(page, f"{backend}-{width}px-job-skipped-runs")
    assert page.console_errors == []


def assert_fits(page, width: int, name: str) -> None:
    sizes = page.evaluate(
        "() => ({doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,"
        " view: window.innerWidth})"
    )
    assert sizes["view"] == width
    assert sizes["doc"] <= width and sizes["body"] <= width, (name, sizes)


def lines_of(page, selector: str) -> int:
    """How many lines the element's text takes (its height over its line height)."""
    return page.eval_on_selector(
        selector,
        "el => Math.round(el.getBoundingClientRect().height"
        " / parseFloat(getComputedStyle(el).lineHeight))",
    )
