"""Reading dependencies between occurrences (SPEC §10): a child's parents with their states,
and the graph of a flow. Writing them is :mod:`.dependencies`' part of enqueue and settle."""

from __future__ import annotations

from typing import Final

from ... import contract
from ...errors import NotFound
from ...models import FlowEdge, FlowGraph, FlowNode, ParentState
from ..tx import Row, Tx
from .base import OperationsBase

__all__ = ["FlowOperations"]

# The most nodes a flow graph read walks (the dashboard draws at most this many).
MAX_GRAPH_NODES: Final = 500


class FlowOperations(OperationsBase):
    """Reads of dependencies: parents with their states, and a flow's graph."""

    def parent_states(self, occurrence_id: str) -> list[ParentState]:
        self._assert_open()
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")

        def body(tx: Tx) -> list[ParentState]:
            seq = self._seq(tx, key)
            return [_parent_state(row) for row in tx.all("parent_states", {"seq": seq})]

        return self._read(body)

    def flow_graph(self, occurrence_id: str, *, limit: int = MAX_GRAPH_NODES) -> FlowGraph:
        self._assert_open()
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        bounded = max(1, min(contract.normalize_positive_int(limit, "limit"), MAX_GRAPH_NODES))

        def body(tx: Tx) -> FlowGraph:
            start = tx.one("get_occurrence", {"occurrence_id": key})
            if start is None:
                raise NotFound(f"Scheduler occurrence does not exist: {key}")
            nodes: dict[int, FlowNode] = {int(start["seq"]): _node(start)}
            edges: set[tuple[int, int]] = set()
            frontier = [int(start["seq"])]
            truncated = False
            # Breadth-first both ways through the edge indexes, stopping at ``bounded`` nodes.
            while frontier:
                seq = frontier.pop(0)
                near: list[tuple[Row, tuple[int, int]]] = []
                for row in tx.all("parent_states", {"seq": seq}):
                    near.append((row, (int(row["seq"]), seq)))
                for row in tx.all("children_of", {"seq": seq, "limit": bounded + 1}):
                    near.append((row, (seq, int(row["seq"]))))
                for row, edge in near:
                    other = int(row["seq"])
                    if other not in nodes:
                        if len(nodes) >= bounded:
                            truncated = True
                            continue
                        nodes[other] = _node(row)
                        frontier.append(other)
                    edges.add(edge)
            ordered = sorted(nodes)
            return FlowGraph(
                nodes=tuple(nodes[seq] for seq in ordered),
                edges=tuple(
                    FlowEdge(nodes[parent].occurrence_id, nodes[child].occurrence_id)
                    for parent, child in sorted(edges)
                ),
                truncated=truncated,
            )

        return self._read(body)

    @staticmethod
    def _seq(tx: Tx, key: str) -> int:
        found = tx.one("seq_of_occurrence", {"occurrence_id": key})
        if found is None:
            raise NotFound(f"Scheduler occurrence does not exist: {key}")
        return int(found["seq"])


def _parent_state(row: Row) -> ParentState:
    status = row["status"]
    return ParentState(
        occurrence_id=row["occurrence_id"],
        job_id=row["job_id"],
        kind=row["kind"],
        status=status,
        result=(
            contract.parse_stored_json(row["result_json"])
            if status == "succeeded" and row["result_json"] is not None
            else None
        ),
        error=(
            contract.parse_stored_json(row["last_error_json"])
            if status in ("dead_letter", "cancelled") and row["last_error_json"] is not None
            else None
        ),
    )


def _node(row: Row) -> FlowNode:
    return FlowNode(row["occurrence_id"], row["job_id"], row["kind"], row["status"])
