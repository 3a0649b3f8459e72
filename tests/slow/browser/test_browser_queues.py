"""The queues page in a real headless browser (Debian's chromium via Playwright), on SQLite and
PostgreSQL: depth, running work, limits and pause state as the store holds them; pause and
resume behind the sign-in and CSRF rules, audited as the signed-in user; an occurrence held
back says why; the page fits a phone (420 px) and a desktop (1,280 px)."""

from __future__ import annotations

import pytest

from jobledger import Queue
from tests.slow.browser.test_browser import assert_fits, dashboard, sign_in
from tests.system.web.conftest import BROWSER_MISSING, screenshot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or ""),
]

LONG_QUEUE = "customer-facing-transactional-notifications-eu-west"


def add_queues(app):
    """A partition-limited queue with one running and two held, a limited queue with a long
    name, and the seeded backlog in ``default``. Returns a held occurrence's id."""
    app.queue("reports", concurrency=4, partition_concurrency=1)
    app.queue(LONG_QUEUE, concurrency=10, worker_concurrency=2)
    held = [
        app.enqueue("billing-export", queue="reports", partition="customer:42", payload={"n": n})
        for n in range(3)
    ]
    app.enqueue("welcome-email", queue=LONG_QUEUE, payload={"to": "eu@example.com"})
    claimed = app.store.claim_next(owner_id="w-queues", lease_ms=600_000, queues=["reports"])
    assert claimed is not None and claimed.id in {o.id for o in held}
    # equally due rows are claimed in id order: any of the other two is held
    return next(o.id for o in held if o.id != claimed.id)


@pytest.mark.parametrize("width", [420, 1280])
def test_queues_page_pause_and_resume(seeded, serve_app, browser_page, backend, width):
    app, _ = seeded
    held = add_queues(app)
    server = serve_app(dashboard(app))
    page, base = browser_page, server.url
    page.set_viewport_size({"width": width, "height": 860})
    sign_in(page, base)
    page.on("dialog", lambda dialog: dialog.accept())

    page.goto(f"{base}/queues")
    depths = {depth.name: depth for depth in app.store.queue_depths()}
    for name, depth in depths.items():
        row = page.locator(f"tr[data-queue='{name}']")
        assert row.locator(f"[data-testid='ready-{name}']").inner_text() == str(depth.ready)
        assert (
            row.locator(f"[data-testid='running-{name}']")
            .inner_text()
            .startswith(str(depth.running))
        )
    reports = page.locator("tr[data-queue='reports']")
    assert "per partition 1" in reports.inner_text() and "concurrency 4" in reports.inner_text()
    assert reports.locator("td").nth(3).inner_text() == "2"  # held
    assert_fits(page, width, "queues")
    screenshot(page, f"{backend}-{width}px-queues")
    if width == 1280:
        screenshot(page, f"{backend}-queues", doc=True)  # docs/images/web-queues.png

    page.fill("[data-testid='reason-reports']", "incident 42: customer API down")
    page.click("[data-testid='pause-reports']")
    page.wait_for_url(f"{base}/queues")
    assert "Paused queue reports as web:alice" in page.inner_text(".flash-success")
    queue = app.store.get_queue("reports")
    assert queue is not None and queue.paused and queue.paused_by == "web:alice"
    assert queue.paused_reason == "incident 42: customer API down"
    assert "incident 42" in page.inner_text("[data-testid='paused-reports']")
    assert app.store.claim_next(owner_id="w", lease_ms=60_000, queues=["reports"]) is None
    assert_fits(page, width, "queues paused")
    screenshot(page, f"{backend}-{width}px-queues-paused")

    page.goto(f"{base}/occurrences/{held}")
    flags = page.inner_text("main")
    assert "Not running: queue paused by web:alice at 2026-" in flags
    assert "Not running: partition customer:42 at its limit (1 running)" in flags
    assert_fits(page, width, "held occurrence")
    screenshot(page, f"{backend}-{width}px-queues-held-occurrence")

    page.goto(f"{base}/queues")
    page.click("[data-testid='resume-reports']")
    page.wait_for_url(f"{base}/queues")
    assert "Resumed queue reports as web:alice" in page.inner_text(".flash-success")
    assert not app.store.get_queue("reports").paused
    actions = [(r.action, r.actor) for r in app.store.audit_log() if r.subject == "reports"]
    assert ("queue_paused", "web:alice") in actions and ("queue_resumed", "web:alice") in actions
    assert page.console_errors == []


def test_queue_actions_refused_without_sign_in_or_csrf_token(
    seeded, serve_app, browser_page, backend
):
    app, _ = seeded
    add_queues(app)
    server = serve_app(dashboard(app, public_reads=True))
    page, base = browser_page, server.url
    form = {"queue": "reports", "paused": "true", "reason": "sneaky"}

    page.goto(f"{base}/queues")
    assert page.locator("form[method=post][action$='/queues/paused']").count() == 0
    assert "Sign in to pause or resume queues" in page.inner_text("main")
    assert page.request.post(f"{base}/queues/paused", form=form).status == 401

    sign_in_page = f"{base}/login"
    page.goto(sign_in_page)
    page.fill("input[name=user]", "alice")
    page.fill("input[name=password]", "correct horse battery staple")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    assert page.request.post(f"{base}/queues/paused", form=form).status == 403
    forged = {**form, "csrf_token": "0" * 32}
    assert page.request.post(f"{base}/queues/paused", form=forged).status == 403
    # A pause without a reason is refused too, with the session's token.
    page.goto(f"{base}/queues")
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    no_reason = {"queue": "reports", "paused": "true", "csrf_token": token}
    assert page.request.post(f"{base}/queues/paused", form=no_reason).status == 400
    assert not app.store.get_queue("reports").paused
    assert not [r for r in app.store.audit_log() if r.action == "queue_paused"]


def test_read_only_queues_page_offers_no_action(seeded, serve_app, browser_page, backend):
    from jobledger.web import WebSettings, create_app

    app, _ = seeded
    app.store.declare_queue(Queue("reports", concurrency=1), actor="ops")
    server = serve_app(create_app(app.store, WebSettings(read_only=True)))
    page, base = browser_page, server.url
    page.goto(f"{base}/queues")
    assert page.locator("form[action$='/queues/paused']").count() == 0
    assert "This dashboard is read-only." in page.inner_text("main")


@pytest.mark.parametrize("width", [420, 1280])
def test_a_queue_has_its_own_page(seeded, serve_app, browser_page, backend, width):
    app, _ = seeded
    held = add_queues(app)
    server = serve_app(dashboard(app))
    page, base = browser_page, server.url
    page.set_viewport_size({"width": width, "height": 860})
    sign_in(page, base)
    page.goto(f"{base}/queues")
    page.click("[data-testid='queue-link-reports']")
    page.wait_for_url(f"{base}/queues/reports")
    assert page.inner_text("[data-testid='queue-name']") == "reports"
    depth = next(d for d in app.store.queue_depths() if d.name == "reports")
    assert page.inner_text("[data-testid='queue-held']") == str(depth.held) == "2"
    assert page.inner_text("[data-testid='queue-running']").startswith("1")
    limits = page.inner_text("[data-testid='queue-limits']")
    assert "concurrency 4" in limits and "per partition 1" in limits
    running = page.locator("[data-testid='queue-running-list'] tr[data-occurrence]")
    assert running.count() == 1
    waiting = page.inner_text(f"[data-testid='queue-waiting-list'] tr[data-occurrence='{held}']")
    assert "partition customer:42 at its limit (1 running)" in waiting
    assert page.locator("[data-testid='queue-recent'] tr[data-occurrence]").count() == 3
    assert_fits(page, width, "queue page")
    screenshot(page, f"{backend}-{width}px-queue-reports")
    long_name = page.goto(f"{base}/queues/{LONG_QUEUE}")
    assert long_name is not None and long_name.status == 200
    assert_fits(page, width, "long queue page")
    assert page.console_errors == []
