"""What dependencies between occurrences look like from outside (SPEC §10)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FlowEdge", "FlowGraph", "FlowNode", "ParentState"]


@dataclass(frozen=True, slots=True)
class ParentState:
    """One parent of an occurrence and what it came to: its ``status``, its ``result`` once it
    succeeded (``None`` otherwise) and its ``error`` once it failed."""

    occurrence_id: str
    job_id: str
    kind: str
    status: str
    result: Any = None
    error: Any = None


@dataclass(frozen=True, slots=True)
class FlowNode:
    """An occurrence in a flow's graph, with its state."""

    occurrence_id: str
    job_id: str
    kind: str
    status: str


@dataclass(frozen=True, slots=True)
class FlowEdge:
    """``child`` runs after ``parent``."""

    parent: str
    child: str


@dataclass(frozen=True, slots=True)
class FlowGraph:
    """The occurrences connected to one occurrence through dependencies, both ways, in the
    order they were enqueued; ``truncated`` when the graph had more nodes than were read."""

    nodes: tuple[FlowNode, ...]
    edges: tuple[FlowEdge, ...]
    truncated: bool = False
