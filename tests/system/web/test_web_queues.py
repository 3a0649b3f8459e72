"""The queues page and its pause/resume action without a browser: JSON for scripts, the
bearer token, and the refusals (SPEC §7 surfaces)."""

from __future__ import annotations

import pytest

from jobledger import Queue
from tests.system.web.helpers import BEARER, JSON, client_for, csrf_of, sign_in


@pytest.fixture
def store(sqlite_seeded):
    app, _ = sqlite_seeded
    app.store.declare_queue(Queue("reports", concurrency=2), actor="ops")
    return app.store


def test_queues_page_json_matches_the_store(store):
    with client_for(store) as client:
        document = client.get("/queues?format=json", headers=BEARER).json()
    names = [entry["queue"]["name"] for entry in document["queues"]]
    assert names == [depth.name for depth in store.queue_depths()]
    reports = next(e for e in document["queues"] if e["queue"]["name"] == "reports")
    assert reports["queue"]["concurrency"] == 2 and reports["holdingBack"] == []


def test_scripts_pause_and_resume_with_the_bearer_token(store):
    with client_for(store) as client:
        headers = {**BEARER, **JSON}
        paused = client.post(
            "/queues/paused",
            data={"queue": "reports", "paused": "true", "reason": "incident"},
            headers=headers,
        )
        assert paused.status_code == 200
        assert paused.json() == {"ok": True, "queue": "reports", "paused": True}
        queue = store.get_queue("reports")
        assert queue is not None and queue.paused and queue.paused_by == "web:token"
        page = client.get("/queues", headers=BEARER).text
        assert "incident" in page and "Resume" in page
        resumed = client.post(
            "/queues/paused", data={"queue": "reports", "paused": "false"}, headers=headers
        )
        assert resumed.json()["paused"] is False
        for bad in ({"queue": "reports"}, {"paused": "true"}, {"queue": "", "paused": "x"}):
            assert client.post("/queues/paused", data=bad, headers=headers).status_code == 400
        refused = client.post(
            "/queues/paused",
            data={"queue": "x" * 65, "paused": "true", "reason": "r"},
            headers=headers,
        )
        assert refused.status_code == 409 and refused.json()["ok"] is False


def test_a_signed_in_browser_form_pauses_with_the_csrf_token(store):
    with client_for(store) as client:
        sign_in(client)
        token = csrf_of(client.get("/queues").text)
        form = {"queue": "reports", "paused": "true", "reason": "maintenance"}
        assert client.post("/queues/paused", data=form).status_code == 403  # no token
        done = client.post(
            "/queues/paused", data={**form, "csrf_token": token}, follow_redirects=False
        )
        assert done.status_code == 303 and done.headers["location"].endswith("/queues")
        assert store.get_queue("reports").paused
