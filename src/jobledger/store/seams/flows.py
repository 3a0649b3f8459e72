"""The Store protocol's operations on dependencies between occurrences (SPEC §10; part of
:class:`jobledger.store.base.Store`; the shared rules are in that module's docstring).

Dependencies are written by the enqueue operations (``EnqueueRequest.after``) and decided by the
operations that make occurrences terminal:

* a child is ``blocked`` while any parent is undecided; when every parent succeeded it becomes
  ``queued`` (due at the later of its due instant and now) with ``occurrence_unblocked``;
* a parent dead-lettered or cancelled cancels blocked children whose ``on_parent_failure`` is
  ``"cancel"`` (reason ``parent_failed``: an ``occurrence_cancelled`` event and an audit record
  each), and so on down the graph; ``"run"`` children count it as terminal;
* an outcome-unknown dead letter decides nothing until it is adjudicated;
* all of it in the transaction that made the deciding parent terminal. Finding a parent's
  children is a probe of the edge primary key: O(children), never a scan of occurrences.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ...models import EnqueueRequest, FlowGraph, Occurrence, ParentState

__all__ = ["FlowSeam"]


class FlowSeam(Protocol):
    """Graphs of occurrences: written whole, read back with their states."""

    def enqueue_flow(
        self, requests: Sequence[EnqueueRequest], *, expected_ids: Sequence[str]
    ) -> list[Occurrence]:
        """:meth:`enqueue_batch` for a graph built ahead of its transaction (``App.flow``):
        each request must write, or find by its key, the occurrence named at the same index of
        ``expected_ids``, else ``SCHEDULER_FLOW_CONFLICT`` (a job changed revision, or a key was
        taken meanwhile) and nothing is written. A request's ``after`` may name occurrences that
        existed before, or requests earlier in the list; any other parent is
        ``SCHEDULER_NOT_FOUND`` with ``details["index"]``, and nothing is written."""
        ...

    def parent_states(self, occurrence_id: str) -> list[ParentState]:
        """The parents of ``occurrence_id`` in the order they were enqueued, each with its
        status, result (succeeded) or error (failed); ``SCHEDULER_NOT_FOUND`` for an unknown
        occurrence. One read through the child index."""
        ...

    def flow_graph(self, occurrence_id: str, *, limit: int = 500) -> FlowGraph:
        """Every occurrence connected to ``occurrence_id`` through dependencies (parents and
        children, transitively), at most ``limit`` (≤ 500) of them, with the edges between
        them; ``truncated`` when more exist. ``SCHEDULER_NOT_FOUND`` for an unknown one."""
        ...
