"""The adjudication routes over HTTP (TestClient), both stores: the pages, the JSON decision
for scripts, refusals as JSON, and bad forms."""

from __future__ import annotations

import pytest

import jobledger
from jobledger.testing import run_until_idle
from tests.system.web.helpers import BEARER, JSON, client_for


@pytest.fixture
def unknown(target, clock):
    app = jobledger.App(target, clock=clock, authorize=jobledger.allow_all)

    @app.handler("charge", on_lost_lease="adjudicate")
    def charge(ctx: jobledger.JobContext) -> None:
        raise jobledger.OutcomeUnknown("gateway timeout")

    app.ensure_job("pay", "charge")
    occurrence = app.enqueue("pay", payload={"order": "o-1"})
    run_until_idle(app)
    with app:
        yield app, occurrence.id


def test_pages_and_a_scripted_decision(unknown):
    app, occurrence_id = unknown
    client = client_for(app.store)
    listing = client.get("/adjudication", headers=BEARER)
    assert listing.status_code == 200
    assert occurrence_id in listing.text
    page = client.get(f"/adjudication/{occurrence_id[:14]}", headers=BEARER)
    assert page.status_code == 200
    case = app.get_adjudication_case(occurrence_id)
    assert case is not None and case.evidence_digest is not None
    assert case.evidence_digest in page.text
    form = {
        "id": occurrence_id,
        "decision": "not_applied",
        "evidence_digest": case.evidence_digest,
        "reason": "no charge at the PSP",
        "checked": "yes",
    }
    answer = client.post("/adjudication/decide", data=form, headers={**BEARER, **JSON})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["ok"] is True and body["actor"] == "web:token"
    assert body["case"]["adjudication"]["decision"] == "not_applied"
    assert app.get_occurrence(occurrence_id).status == "retry_wait"  # type: ignore[union-attr]
    again = client.post("/adjudication/decide", data=form, headers={**BEARER, **JSON})
    assert again.status_code == 409
    assert again.json()["code"] == "SCHEDULER_ADJUDICATION_ALREADY_RECORDED"
    assert "Decided." in client.get(f"/adjudication/{occurrence_id}", headers=BEARER).text
    timeline = client.get(f"/occurrences/{occurrence_id}", headers=BEARER).text
    assert "Outcome adjudicated by an operator" in timeline
    assert "no charge at the PSP" in timeline


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"decision": "maybe"}, 400),
        ({"checked": ""}, 400),
        ({"reason": " "}, 400),
        ({"id": ""}, 400),
        ({"evidence_digest": "sha256:" + "0" * 64}, 409),
    ],
)
def test_bad_forms_change_nothing(unknown, change, status):
    app, occurrence_id = unknown
    client = client_for(app.store)
    case = app.get_adjudication_case(occurrence_id)
    assert case is not None
    form = {
        "id": occurrence_id,
        "decision": "applied",
        "evidence_digest": case.evidence_digest,
        "reason": "seen at the PSP",
        "checked": "yes",
        **change,
    }
    answer = client.post("/adjudication/decide", data=form, headers={**BEARER, **JSON})
    assert answer.status_code == status, answer.text
    assert app.get_adjudication_case(occurrence_id) == case


def test_an_unknown_case_is_a_404(unknown):
    app, _ = unknown
    client = client_for(app.store)
    assert client.get("/adjudication/occ_ffffffffffff", headers=BEARER).status_code == 404


def test_an_outcome_unknown_dead_letter_is_adjudicated_not_requeued(unknown):
    """SPEC §9/§14: the dashboard offers no plain requeue of an undecided outcome-unknown dead
    letter (it links to its case), and a requeue posted anyway is refused by the store."""
    app, occurrence_id = unknown
    client = client_for(app.store)
    page = client.get(f"/occurrences/{occurrence_id}", headers=BEARER).text
    assert 'data-testid="adjudicate-instead"' in page
    assert "Requeue for one more attempt" not in page
    listing = client.get("/dead-letters", headers=BEARER).text
    assert 'data-testid="adjudicate-link"' in listing
    assert f'value="{occurrence_id}:' not in listing
    fence = app.get_occurrence(occurrence_id).fence  # type: ignore[union-attr]
    answer = client.post(
        "/dead-letters/requeue",
        data={"id": f"{occurrence_id}:{fence}", "reason": "try again"},
        headers={**BEARER, **JSON},
    )
    body = answer.json()
    assert body["ok"] is False
    assert [item["code"] for item in body["failed"]] == ["SCHEDULER_REQUEUE_NEEDS_ADJUDICATION"]
    assert app.get_occurrence(occurrence_id).status == "dead_letter"  # type: ignore[union-attr]


def test_the_dashboard_revives_a_flow_and_titles_a_cascaded_cancel(target, clock):
    app = jobledger.App(target, clock=clock, authorize=jobledger.allow_all)
    declined = {"yes": True}

    @app.handler("charge")
    def charge(ctx: jobledger.JobContext) -> str:
        if declined["yes"]:
            raise jobledger.Fail("card declined")
        return "paid"

    @app.handler("ship")
    def ship(ctx: jobledger.JobContext) -> str:
        return "shipped"

    app.ensure_job("charge", "charge")
    app.ensure_job("ship", "ship")
    with app:
        with app.flow() as flow:
            paid = flow.enqueue("charge")
            shipped = flow.enqueue("ship", after=[paid])
        run_until_idle(app)
        assert app.get_occurrence(shipped.id).status == "cancelled"  # type: ignore[union-attr]
        client = client_for(app.store)
        child_page = client.get(f"/occurrences/{shipped.id}", headers=BEARER).text
        assert "Cancelled: a parent failed" in child_page
        assert "Cancelled by an operator" not in child_page
        page = client.get(f"/occurrences/{paid.id}", headers=BEARER).text
        assert 'data-testid="revive-children"' in page
        fence = app.get_occurrence(paid.id).fence  # type: ignore[union-attr]
        answer = client.post(
            "/dead-letters/requeue",
            data={"id": f"{paid.id}:{fence}", "reason": "card updated", "revive_children": "1"},
            headers={**BEARER, **JSON},
        )
        assert answer.json()["ok"] is True, answer.text
        declined["yes"] = False
        run_until_idle(app)
        assert app.get_occurrence(shipped.id).result == "shipped"  # type: ignore[union-attr]


def test_a_lost_rerun_is_a_case_of_its_own_on_the_pages(unknown):
    """Issue 30 (items 5 and 6): the listing shows when each lost attempt's handler began, and a
    re-run granted by not_applied that is lost again is listed and shown as a new case."""
    app, occurrence_id = unknown
    client = client_for(app.store)
    case = app.get_adjudication_case(occurrence_id)
    assert case is not None and case.evidence_digest is not None and case.started_at is not None
    listing = client.get("/adjudication", headers=BEARER).text
    assert "Handler began" in listing and 'data-testid="started">unknown' not in listing
    app.adjudicate(
        occurrence_id, decision="not_applied", evidence_digest=case.evidence_digest, reason="no"
    )
    run_until_idle(app)  # the re-run raises OutcomeUnknown again: a new case
    again = app.get_adjudication_case(occurrence_id)
    assert again is not None and again.eligible and again.fence == case.fence + 1
    assert occurrence_id in client.get("/adjudication", headers=BEARER).text
    page = client.get(f"/adjudication/{occurrence_id}", headers=BEARER).text
    assert "Outcome unknown" in page and 'data-testid="previous"' in page
    assert again.evidence_digest in page
