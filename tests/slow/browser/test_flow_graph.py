"""The flow graph on an occurrence's page (SPEC §10): server-rendered SVG with each node's
state, the parents table of a blocked occurrence; drawn in Debian's chromium at 420 px and at
desktop width (screenshots in ``tests/system/web/artifacts/``)."""

from __future__ import annotations

import re

import pytest

import jobledger
from jobledger.models import FlowEdge, FlowGraph, FlowNode
from jobledger.testing import ManualHeartbeat
from jobledger.web.flowgraph import MAX_PER_COLUMN, render_flow_svg
from tests.slow.browser.test_browser import assert_fits, dashboard, sign_in
from tests.system.web.conftest import BROWSER_MISSING, screenshot


def _id(n: int) -> str:
    return f"occ_{n:064x}"


def test_a_wide_column_is_summarised_and_the_current_node_kept():
    root = FlowNode(_id(0), "fetch", "fetch", "succeeded")
    leaves = [
        FlowNode(_id(i), "thumb", "thumbnail", "succeeded" if i % 3 else "queued")
        for i in range(1, 31)
    ]
    join = FlowNode(_id(99), "summary", "summary", "blocked")
    edges = [FlowEdge(root.occurrence_id, leaf.occurrence_id) for leaf in leaves]
    edges += [FlowEdge(leaf.occurrence_id, join.occurrence_id) for leaf in leaves]
    graph = FlowGraph((root, *leaves, join), tuple(edges))
    svg = str(render_flow_svg(graph, leaves[-1].occurrence_id, lambda key: f"/o/{key}"))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    # 1 root, MAX_PER_COLUMN leaves (the current one among them), one summary box, the join
    assert svg.count('<g class="fg-node') == 1 + MAX_PER_COLUMN + 1 + 1
    assert f"+{30 - MAX_PER_COLUMN} more" in svg
    assert 'class="fg-node fg-thumbnail' not in svg  # classes name states, not kinds
    assert 'class="fg-node fg-succeeded fg-current"' in svg or "fg-queued fg-current" in svg
    assert f'href="/o/{leaves[-1].occurrence_id}"' not in svg  # the current one is no link
    assert f'href="/o/{join.occurrence_id}"' in svg
    # every drawn edge once: root -> each shown leaf and the summary, each of those -> join
    assert svg.count('class="fg-edge"') == 2 * (MAX_PER_COLUMN + 1)
    width = int(re.search(r'width="(\d+)"', svg)[1])
    assert width < 700  # three columns
    assert "<script" not in svg


def test_labels_are_escaped():
    node = FlowNode(_id(1), "j", "<b>kind</b>", "queued")
    other = FlowNode(_id(2), "j", "k", "blocked")
    graph = FlowGraph((node, other), (FlowEdge(node.occurrence_id, other.occurrence_id),))
    svg = str(render_flow_svg(graph, other.occurrence_id, lambda key: f"/o/{key}?a=1&b=2"))
    assert "<b>" not in svg and "&lt;b&gt;kind&lt;/b&gt;" in svg
    assert "a=1&amp;b=2" in svg


def _flow(app: jobledger.App) -> tuple[list[jobledger.Occurrence], jobledger.Occurrence]:
    @app.handler("thumbnail")
    def thumbnail(ctx: jobledger.JobContext) -> str:
        if ctx.payload["n"] == 3:
            raise ValueError("unreadable image")
        return f"thumb-{ctx.payload['n']}"

    app.handler("summary")(lambda ctx: len(ctx.parents))
    app.create_job("thumbnail", "thumbnail", max_attempts=1)
    app.create_job("summary", "summary")
    with app.flow() as flow:
        images = [flow.enqueue("thumbnail", payload={"n": n}) for n in range(14)]
        join = flow.enqueue("summary", after=images, on_parent_failure="run")
        flow.enqueue("summary", after=[images[3]])  # cancelled when image 3 fails
    # 6 of 14 run, image 3 fails. Targeted runs: equally due work is claimed in id order, and
    # the graph draws the first images enqueued.
    runtime = app.runtime(heartbeat=ManualHeartbeat())
    try:
        for image in images[:6]:
            runtime.run_occurrence(image.id)
    finally:
        app._discard_runtime(runtime)
    return images, join


@pytest.mark.browser
@pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or "")
@pytest.mark.parametrize("width", [420, 1280])
def test_the_occurrence_page_draws_its_flow(target, clock, serve_app, browser_page, backend, width):
    with jobledger.App(target, clock=clock, authorize=jobledger.allow_all) as app:
        images, join = _flow(app)
        server = serve_app(dashboard(app))
        page, base = browser_page, server.url
        page.set_viewport_size({"width": width, "height": 900})
        sign_in(page, base)
        page.goto(f"{base}/occurrences/{join.id}")
        assert_fits(page, width, "flow")  # a wide graph scrolls inside its panel
        graph = page.locator("[data-testid=flow] svg[data-testid=flow-graph]")
        assert graph.is_visible()
        states = graph.locator("g.fg-node").evaluate_all(
            "nodes => nodes.map(n => n.getAttribute('data-status'))"
        )
        # 14 images in one column: 8 drawn and a summary; the join; the cancelled child
        assert len(states) == MAX_PER_COLUMN + 1 + 2
        assert states.count("succeeded") == 5 and states.count("dead_letter") == 1
        assert states.count("blocked") == 1 and states.count("cancelled") == 1
        assert states.count("more") == 1
        assert graph.locator("g.fg-current").count() == 1
        parents = page.inner_text("[data-testid=flow]")
        assert "waits for 8 of 14" in parents
        rows = page.locator("[data-testid=parents] tbody tr")
        assert rows.count() == 14
        screenshot(page, f"{backend}-{width}px-flow")
        # a node links to its occurrence's page, which draws the same flow
        graph.locator(f"a[href$='{images[0].id}']").click()
        page.wait_for_url(f"**/occurrences/{images[0].id}")
        assert page.locator("[data-testid=flow] svg g.fg-current").count() == 1
        assert page.console_errors == []
