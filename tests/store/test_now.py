"""Store.now(): the instant the store itself will compare leases and due times against."""

from __future__ import annotations

from tests.store.helpers import raises_code


def test_now_is_the_injected_clock(store, clock):
    assert store.now() == clock()
    clock.advance(1234)
    assert store.now() == clock()


def test_now_on_a_closed_store(store):
    store.close()
    with raises_code("SCHEDULER_STORE_CLOSED"):
        store.now()
