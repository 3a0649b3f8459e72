"""The adjudication pages in a real browser (Debian's chromium via Playwright), both stores:
open cases listed, a case's evidence shown, a decision recorded behind sign-in and CSRF, a
stale page refused, and the layout at 420 px and on a desktop. Screenshots go to
``tests/system/web/artifacts/``."""

from __future__ import annotations

import pytest

import jobledger
from jobledger.testing import run_until_idle
from tests.slow.browser.test_browser import assert_fits, dashboard, sign_in
from tests.system.web.conftest import BROWSER_MISSING, USERS, screenshot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or ""),
]


@pytest.fixture
def payments(target, clock):
    app = jobledger.App(target, clock=clock, authorize=jobledger.allow_all)

    @app.handler("charge", on_lost_lease="adjudicate")
    def charge(ctx: jobledger.JobContext) -> dict:
        if ctx.attempt == 1:
            raise jobledger.OutcomeUnknown(
                "payment provider timed out after 30 s", details={"provider": "psp", "ref": "r-1"}
            )
        return {"charged": ctx.payload["amount"]}

    app.ensure_job("charge-card-for-order-with-a-long-identifier-2026-12", "charge", max_attempts=3)
    ids = [
        app.enqueue(
            "charge-card-for-order-with-a-long-identifier-2026-12",
            payload={"order": f"ord_{n}", "amount": {"currency": "EUR", "cents": 1999 + n}},
        ).id
        for n in range(2)
    ]
    run_until_idle(app)
    with app:
        yield app, ids


def test_decide_a_case_from_the_dashboard(payments, serve_app, browser_page, backend):
    app, (first, second) = payments
    server = serve_app(dashboard(app))
    page, base = browser_page, server.url
    sign_in(page, base)

    page.click("nav >> text=Adjudication")
    page.wait_for_url(f"{base}/adjudication")
    rows = page.locator("[data-testid=cases] tbody tr")
    assert sorted(rows.evaluate_all("rows => rows.map(r => r.dataset.occurrence)")) == sorted(
        [first, second]
    )
    assert "payment provider timed out" in page.inner_text("[data-testid=cases]")
    screenshot(page, f"{backend}-adjudication")

    page.click(f"tr[data-occurrence='{first}'] [data-testid=open-case]")
    page.wait_for_url(f"{base}/adjudication/{first}")
    case = app.get_adjudication_case(first)
    assert case is not None
    assert page.inner_text("[data-testid=digest]") == case.evidence_digest
    assert '"cents": 1999' in page.inner_text("[data-testid=payload]")
    screenshot(page, f"{backend}-adjudication-case")

    # The browser refuses to submit without the confirmation tick (required), then records it.
    page.check("[data-testid=applied]")
    page.fill("[data-testid=reason]", "PSP dashboard shows charge ch_1999")
    page.click("[data-testid=decide]")
    assert page.url == f"{base}/adjudication/{first}"
    assert app.get_adjudication_case(first).eligible  # type: ignore[union-attr]
    page.check("[data-testid=checked]")
    page.click("[data-testid=decide]")
    page.wait_for_selector("[data-testid=decision]")
    assert "Recorded applied" in page.inner_text(".flash-success")
    assert "web:alice" in page.inner_text("[data-testid=decision]")
    screenshot(page, f"{backend}-adjudication-decided")
    decided = app.get_occurrence(first)
    assert decided is not None and decided.status == "succeeded"
    assert decided.result["adjudication"] == "applied"

    # A page loaded before the case changed: its digest is stale, the decision is refused.
    page.goto(f"{base}/adjudication/{second}")
    stale = app.get_adjudication_case(second)
    assert stale is not None and stale.evidence_digest is not None
    app.store.requeue_dead_letter(
        occurrence_id=second,
        expected_fence=stale.fence,
        reason="retry",
        actor="ops",
        override_adjudication=True,
    )
    claimed = app.store.claim_next(owner_id="w", lease_ms=60_000)
    assert claimed is not None and claimed.id == second
    app.store.settle(
        occurrence_id=second,
        owner_id="w",
        fence=claimed.fence,
        outcome="failed",
        error={"code": "SCHEDULER_OUTCOME_UNKNOWN", "message": "timed out again"},
        retryable=False,
    )
    page.check("[data-testid=not-applied]")
    page.fill("[data-testid=reason]", "no charge at the PSP")
    page.check("[data-testid=checked]")
    page.click("[data-testid=decide]")
    page.wait_for_selector(".flash-error")
    assert "SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT" in page.inner_text(".flash-error")
    assert app.get_adjudication_case(second).eligible  # type: ignore[union-attr]
    page.reload()  # the fresh evidence: now it is recorded
    page.check("[data-testid=not-applied]")
    page.fill("[data-testid=reason]", "no charge at the PSP")
    page.check("[data-testid=checked]")
    page.click("[data-testid=decide]")
    page.wait_for_selector("[data-testid=decision]")
    assert app.get_occurrence(second).status == "retry_wait"  # type: ignore[union-attr]
    assert page.console_errors == []


def test_deciding_needs_a_session_and_its_csrf_token(payments, serve_app, browser_page):
    app, (first, _second) = payments
    server = serve_app(dashboard(app, public_reads=True))
    page, base = browser_page, server.url
    case = app.get_adjudication_case(first)
    assert case is not None
    form = {
        "id": first,
        "decision": "applied",
        "evidence_digest": case.evidence_digest or "",
        "reason": "sneaky",
        "checked": "yes",
    }
    page.goto(f"{base}/adjudication/{first}")
    assert page.locator("[data-testid=decide-form]").count() == 0
    assert "Sign in" in page.inner_text("main")
    assert page.request.post(f"{base}/adjudication/decide", form=form).status == 401
    page.goto(f"{base}/login")
    page.fill("input[name=user]", "alice")
    page.fill("input[name=password]", USERS["alice"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    assert page.request.post(f"{base}/adjudication/decide", form=form).status == 403
    forged = {**form, "csrf_token": "0" * 32}
    assert page.request.post(f"{base}/adjudication/decide", form=forged).status == 403
    assert app.get_adjudication_case(first) == case  # nothing recorded


@pytest.mark.parametrize("width", [420, 1280])
def test_the_adjudication_pages_fit(payments, serve_app, browser_page, backend, width):
    app, (first, _second) = payments
    server = serve_app(dashboard(app))
    page, base = browser_page, server.url
    page.set_viewport_size({"width": width, "height": 860})
    sign_in(page, base)
    for name, path in (("adjudication", "/adjudication"), ("case", f"/adjudication/{first}")):
        page.goto(base + path)
        assert_fits(page, width, name)
        screenshot(page, f"{backend}-{width}px-adjudication-{name}")
    assert page.console_errors == []
