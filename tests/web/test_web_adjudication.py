"""The adjudication routes over HTTP (TestClient), both stores: the pages, the JSON decision
for scripts, refusals as JSON, and bad forms."""

from __future__ import annotations

import pytest

import jobledger
from jobledger.testing import run_until_idle
from tests.web.helpers import BEARER, JSON, client_for


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
