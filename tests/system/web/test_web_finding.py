"""Finding one customer's work on the dashboard (issue 32, item 7), on both stores: the
occurrences list filtered by queue, partition and idempotency key, and a page per queue
(``/queues/<name>``: limits, depth, running and held-back work, newest occurrences)."""

from __future__ import annotations

import re

import pytest

from tests.system.web.helpers import BEARER, client_for

ROW = re.compile(r'<tr data-occurrence="([^"]+)"')


@pytest.fixture
def app(seeded):
    app, _ = seeded
    app.queue("reports", concurrency=4, partition_concurrency=1)
    return app


def _customer_21(app):
    """billing-export for customer 21 three times in `reports` (one running, two held back),
    and a keyed welcome mail for order 21."""
    held = [
        app.enqueue(
            "billing-export",
            queue="reports",
            partition="customer:21",
            key=f"order-21-{n}",
            payload={"n": n},
        )
        for n in range(3)
    ]
    mail = app.enqueue("welcome-email", key="order-21", payload={"to": "c21@example.com"})
    running = app.store.claim_next(owner_id="w-find", lease_ms=600_000, queues=["reports"])
    assert running is not None
    return held, mail, running


def test_occurrences_filter_by_queue_partition_and_key(app):
    held, mail, _ = _customer_21(app)
    with client_for(app.store) as client:
        client.headers.update(BEARER)
        by_partition = ROW.findall(client.get("/occurrences?partition=customer:21").text)
        assert by_partition == [o.id for o in reversed(held)]
        assert ROW.findall(client.get("/occurrences?key=order-21").text) == [mail.id]
        by_queue = ROW.findall(client.get("/occurrences?queue=reports&limit=200").text)
        assert by_queue == [o.id for o in app.store.list_occurrences(queue="reports").items]
        assert set(by_partition) <= set(by_queue) and mail.id not in by_queue
        page = client.get("/occurrences?key=order-21").text
        assert 'value="order-21"' in page  # the filter stays in its box
        assert client.get("/occurrences?partition=" + "p" * 257).status_code == 400


def test_a_queue_has_a_page(app):
    held, _, running = _customer_21(app)
    with client_for(app.store) as client:
        client.headers.update(BEARER)
        listing = client.get("/queues").text
        assert 'href="/queues/reports"' in listing
        response = client.get("/queues/reports")
        assert response.status_code == 200, response.text[:500]
        html = response.text
        assert "concurrency 4" in html and "per partition 1" in html
        running_section = html.split('data-testid="queue-running-list"')[1].split("</section>")[0]
        assert ROW.findall(running_section) == [running.id]
        waiting = html.split('data-testid="queue-waiting-list"')[1].split("</section>")[0]
        assert set(ROW.findall(waiting)) == {o.id for o in held} - {running.id}
        assert "customer:21" in waiting and "limit" in waiting  # why each is held back
        recent = html.split('data-testid="queue-recent"')[1].split("</section>")[0]
        assert ROW.findall(recent) == [o.id for o in reversed(held)]
        document = client.get("/queues/reports?format=json").json()
        assert document["queue"]["concurrency"] == 4
        assert document["running"] == [running.id] and document["held"] == 2
        assert document["recent"] == [o.id for o in reversed(held)]
        # the default queue exists without a declaration: it has occurrences
        assert client.get("/queues/default").status_code == 200
        assert client.get("/queues/no-such-queue").status_code == 404
        assert client.get("/queues/" + "q" * 65).status_code == 404


def test_tags_filter_the_list_and_the_occurrence_page_shows_tags_meta_and_progress(app):
    tagged = app.enqueue(
        "billing-export",
        queue="reports",
        partition="customer:21",
        tags=["customer:21", "vip"],
        meta={"order": 21, "note": "<b>escaped</b>"},
        payload={"n": 99},
    )
    app.enqueue("billing-export", tags=["customer:22"], payload={"n": 98})
    running = app.store.claim_occurrence(occurrence_id=tagged.id, owner_id="w", lease_ms=600_000)
    app.store.record_progress(
        occurrence_id=tagged.id, owner_id="w", fence=running.fence, done=3, total=4, message="x"
    )
    with client_for(app.store) as client:
        client.headers.update(BEARER)
        listing = client.get("/occurrences?tag=customer:21").text
        assert ROW.findall(listing) == [tagged.id]
        assert 'href="/occurrences?tag=vip"' in listing  # its tags link to their lists
        assert ROW.findall(client.get("/occurrences?tag=vip&status=running").text) == [tagged.id]
        assert client.get("/occurrences?tag=has%20space").status_code == 400
        page = client.get(f"/occurrences/{tagged.id}").text
        tags = page.split('data-testid="tags"')[1].split("</dd>")[0]
        assert "customer:21" in tags and "vip" in tags
        assert "&lt;b&gt;escaped&lt;/b&gt;" in page and "<b>escaped</b>" not in page
        progress = page.split('data-testid="progress"')[1].split("</dd>")[0]
        assert "<progress" in progress and "3 of 4 (75%) — x, attempt 1" in progress
        assert 'href="/queues/reports"' in page
        assert 'href="/occurrences?partition=customer%3A21"' in page or (
            'href="/occurrences?partition=customer:21"' in page
        )
