"""examples/fastapi_orders.py: the handler's order row and its job commit together."""

from __future__ import annotations

import importlib
import sys

import psycopg
import pytest

pytestmark = pytest.mark.postgres


def test_the_order_and_its_confirmation_commit_together_or_not_at_all(
    postgres_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    monkeypatch.setenv("SHOP_DATABASE", postgres_database_url)
    sys.modules.pop("examples.fastapi_orders", None)
    example = importlib.import_module("examples.fastapi_orders")
    with TestClient(example.api, raise_server_exceptions=False) as client:
        made = client.post("/orders", json={"email": "ada@example.com", "total_cents": 4200})
        assert made.status_code == 201, made.text
        refused = client.post("/orders", json={"email": "bob@invalid", "total_cents": 100})
        assert refused.status_code == 422
        broken = client.post("/orders", json={"email": "eve@example.com", "total_cents": -1})
        assert broken.status_code == 500  # the failed INSERT rolled the transaction back
    with psycopg.connect(postgres_database_url) as conn:
        orders = conn.execute("SELECT id, email FROM orders").fetchall()
        jobs = conn.execute("SELECT payload_json FROM jobledger.occurrences").fetchall()
    assert [email for _, email in orders] == ["ada@example.com"]
    assert len(jobs) == 1 and '"ada@example.com"' in jobs[0][0]
    assert made.json()["orderId"] == orders[0][0]
