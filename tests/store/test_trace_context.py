"""Trace context stored with an occurrence (``occurrences.trace_json``): written by the enqueue,
returned by every read and by the claim, kept by a deduplicated enqueue, validated first."""

from __future__ import annotations

import pytest

from jobledger import EnqueueRequest

from .helpers import claim, enqueue, make_job, raises_code

INVALID = "SCHEDULER_INVALID_ARGUMENT"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_enqueue_stores_the_trace_context_and_the_claim_returns_it(store, clock, authority):
    make_job(store, authority, "job-a")
    context = {"traceparent": PARENT, "tracestate": "vendor=opaque,other=1"}
    occurrence = enqueue(store, "job-a", clock(), "t1", trace_context=context)
    assert occurrence.trace_context == context
    assert store.get_occurrence(occurrence.id).trace_context == context
    claimed = claim(store)
    assert claimed.id == occurrence.id
    assert claimed.trace_context == context


def test_an_untraced_enqueue_stores_none(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t1")
    assert occurrence.trace_context is None
    assert claim(store).trace_context is None


def test_an_empty_tracestate_is_not_stored(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(
        store, "job-a", clock(), "t1", trace_context={"traceparent": PARENT, "tracestate": ""}
    )
    assert store.get_occurrence(occurrence.id).trace_context == {"traceparent": PARENT}


def test_a_deduplicated_enqueue_keeps_the_first_trace_context(store, clock, authority):
    make_job(store, authority, "job-a")
    first = enqueue(store, "job-a", clock(), "t1", trace_context={"traceparent": PARENT})
    again = enqueue(store, "job-a", clock(), "t1", trace_context={"traceparent": OTHER})
    assert again.deduplicated is True
    assert again.trace_context == {"traceparent": PARENT}
    assert store.get_occurrence(first.id).trace_context == {"traceparent": PARENT}


def test_a_batch_stores_one_trace_context_per_request(store, clock, authority):
    make_job(store, authority, "job-a")
    now = clock()
    written = store.enqueue_batch(
        [
            EnqueueRequest("job-a", now, "b1", trace_context={"traceparent": PARENT}),
            EnqueueRequest("job-a", now, "b2"),
            EnqueueRequest(
                "job-a", now, "b3", once_per_trigger=True, trace_context={"traceparent": OTHER}
            ),
        ]
    )
    assert [o.trace_context for o in written] == [
        {"traceparent": PARENT},
        None,
        {"traceparent": OTHER},
    ]
    stored = [store.get_occurrence(o.id).trace_context for o in written]
    assert stored == [{"traceparent": PARENT}, None, {"traceparent": OTHER}]


@pytest.mark.parametrize(
    "context",
    [
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        {"traceparent": "not-a-traceparent"},
        {"traceparent": PARENT.upper()},
        {"traceparent": PARENT, "baggage": "k=v"},
        {"tracestate": "a=b"},
        {"traceparent": PARENT, "tracestate": "x" * 513},
        {"traceparent": PARENT, "tracestate": "caf\u00e9=1"},
        {"traceparent": PARENT, "tracestate": 7},
    ],
)
def test_a_bad_trace_context_is_refused_and_nothing_is_written(store, clock, authority, context):
    make_job(store, authority, "job-a")
    with raises_code(INVALID) as info:
        enqueue(store, "job-a", clock(), "t1", trace_context=context)
    assert info.value.details["field"].startswith("trace_context")
    with raises_code(INVALID) as info:
        store.enqueue_batch([EnqueueRequest("job-a", clock(), "t2", trace_context=context)])
    assert info.value.details["index"] == 0
    assert store.list_occurrences(job_id="job-a").items == ()
