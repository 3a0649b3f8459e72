"""A flow's graph as inline SVG, drawn on the server (SPEC §10; no script, no build step).

Occurrences are laid out in columns by depth (the longest chain of parents above them), left to
right, each column in enqueue order; an edge runs from a parent's right side to its child's
left side. A column with more than :data:`MAX_PER_COLUMN` occurrences shows the first ones and
one summary box counting the rest by status, so a fan-out of thousands stays one readable
picture. Colours come from the stylesheet (``.fg-*`` classes, light and dark themes alike).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from markupsafe import Markup

from ..models import FlowGraph
from .formatting import status_label

__all__ = ["MAX_PER_COLUMN", "render_flow_svg"]

MAX_PER_COLUMN: Final = 8
NODE_W: Final = 168
NODE_H: Final = 44
GAP_X: Final = 56
GAP_Y: Final = 14
PAD: Final = 10


@dataclass(slots=True)
class _Box:
    key: str  # an occurrence id, or "more:<column>" for a column's summary box
    column: int
    row: int
    title: str
    subtitle: str
    status: str
    href: str | None


def _columns(graph: FlowGraph) -> dict[str, int]:
    """Each occurrence's depth: 0 for one without parents in the graph, else one more than its
    deepest parent (the graph is acyclic, so this ends)."""
    order = [node.occurrence_id for node in graph.nodes]
    parents: dict[str, list[str]] = {key: [] for key in order}
    for edge in graph.edges:
        parents[edge.child].append(edge.parent)
    depth: dict[str, int] = {}
    for key in order:  # parents were enqueued first, so this visits them first
        stack = [key]
        while stack:
            current = stack[-1]
            missing = [p for p in parents[current] if p not in depth]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            depth[current] = 1 + max((depth[p] for p in parents[current]), default=-1)
    return depth


def _boxes(
    graph: FlowGraph, current: str, link: Callable[[str], str]
) -> tuple[list[_Box], dict[str, str]]:
    """The boxes to draw, and which box stands for each occurrence."""
    depth = _columns(graph)
    by_column: dict[int, list[str]] = {}
    for node in graph.nodes:
        by_column.setdefault(depth[node.occurrence_id], []).append(node.occurrence_id)
    nodes = {node.occurrence_id: node for node in graph.nodes}
    boxes: list[_Box] = []
    drawn_as: dict[str, str] = {}
    for column in sorted(by_column):
        keys = by_column[column]
        # The current occurrence is always drawn, even deep in a wide column.
        shown = keys[:MAX_PER_COLUMN]
        if current in keys and current not in shown:
            shown = [*keys[: MAX_PER_COLUMN - 1], current]
        for row, key in enumerate(shown):
            node = nodes[key]
            boxes.append(
                _Box(
                    key,
                    column,
                    row,
                    node.kind,
                    f"{key[4:12]} · {status_label(node.status)}",
                    node.status,
                    None if key == current else link(key),
                )
            )
            drawn_as[key] = key
        rest = [key for key in keys if key not in set(shown)]
        if rest:
            counts = Counter(nodes[key].status for key in rest)
            summary = ", ".join(f"{n} {status_label(s)}" for s, n in sorted(counts.items()))
            more = f"more:{column}"
            boxes.append(
                _Box(more, column, len(shown), f"+{len(rest)} more", summary, "more", None)
            )
            for key in rest:
                drawn_as[key] = more
    return boxes, drawn_as


def render_flow_svg(graph: FlowGraph, current: str, link: Callable[[str], str]) -> Markup:
    """The graph as an ``<svg>`` element; ``link`` gives an occurrence's page URL. The
    ``current`` occurrence is outlined and not a link."""
    boxes, drawn_as = _boxes(graph, current, link)
    rows = max(box.row for box in boxes) + 1
    columns = max(box.column for box in boxes) + 1
    height = PAD * 2 + rows * NODE_H + (rows - 1) * GAP_Y
    width = PAD * 2 + columns * NODE_W + (columns - 1) * GAP_X
    column_rows = Counter(box.column for box in boxes)
    place: dict[str, tuple[int, int]] = {}
    for box in boxes:
        # each column centred on the tallest one
        offset = (rows - column_rows[box.column]) * (NODE_H + GAP_Y) // 2
        place[box.key] = (
            PAD + box.column * (NODE_W + GAP_X),
            PAD + offset + box.row * (NODE_H + GAP_Y),
        )
    parts = [
        Markup(
            '<svg class="flow-graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" '
            'width="{w}" height="{h}" role="img" aria-label="{label}" data-testid="flow-graph">'
        ).format(
            w=width,
            h=height,
            label=f"Flow of {len(graph.nodes)} occurrences and {len(graph.edges)} dependencies",
        ),
        Markup(
            '<defs><marker id="fg-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" '
            'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" '
            'class="fg-arrow"/></marker></defs>'
        ),
    ]
    drawn_edges = sorted({(drawn_as[e.parent], drawn_as[e.child]) for e in graph.edges})
    for parent, child in drawn_edges:
        (px, py), (cx, cy) = place[parent], place[child]
        x1, y1, x2, y2 = px + NODE_W, py + NODE_H // 2, cx, cy + NODE_H // 2
        bend = GAP_X // 2
        parts.append(
            Markup(
                '<path class="fg-edge" d="M{x1},{y1} C{a},{y1} {b},{y2} {x2},{y2}" '
                'marker-end="url(#fg-arrow)"/>'
            ).format(x1=x1, y1=y1, a=x1 + bend, b=x2 - bend, x2=x2, y2=y2)
        )
    for box in boxes:
        x, y = place[box.key]
        classes = f"fg-node fg-{box.status}" + (" fg-current" if box.key == current else "")
        node = Markup(
            '<g class="{classes}" data-status="{status}"><title>{tip}</title>'
            '<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="7"/>'
            '<text x="{tx}" y="{ty}" class="fg-title">{title}</text>'
            '<text x="{tx}" y="{sy}" class="fg-sub">{sub}</text></g>'
        ).format(
            classes=classes,
            status=box.status,
            tip=f"{box.title} — {box.subtitle}"
            + ("" if box.key.startswith("more:") else f" ({box.key})"),
            x=x,
            y=y,
            w=NODE_W,
            h=NODE_H,
            tx=x + 10,
            ty=y + 18,
            sy=y + 35,
            title=_clip(box.title, 22),
            sub=_clip(box.subtitle, 30),
        )
        if box.href is not None:
            node = Markup('<a href="{href}">{node}</a>').format(href=box.href, node=node)
        parts.append(node)
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def _clip(text: str, keep: int) -> str:
    return text if len(text) <= keep else text[: keep - 1] + "…"
