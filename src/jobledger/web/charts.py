"""Server-rendered SVG charts: settlements per minute and the failure rate over the last hour.

Pure functions of :class:`~jobledger.ThroughputBucket` rows and "now": no JavaScript, no chart
library, nothing fetched. Colours come from CSS classes (``.c-ok``, ``.c-retry``, ``.c-dead``,
``.c-rate``), so the page's stylesheet themes them and the strict Content-Security-Policy (no
inline styles) holds. Every bar and point has a ``<title>`` (a tooltip, and text for screen
readers); the chart as a whole has an ``aria-label`` summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from markupsafe import Markup, escape

from ..models import ThroughputBucket

__all__ = [
    "MINUTE_MS",
    "Minute",
    "failure_bins",
    "failure_chart",
    "per_minute",
    "throughput_chart",
    "window",
]

MINUTE_MS = 60_000
WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 40, 8, 10, 24
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Minute:
    """Settlements of every kind in one minute."""

    start: int
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0

    @property
    def total(self) -> int:
        return self.succeeded + self.retried + self.dead_lettered

    @property
    def failed(self) -> int:
        return self.retried + self.dead_lettered

    @property
    def failure_rate(self) -> float | None:
        return None if self.total == 0 else self.failed / self.total


def window(now: int, minutes: int = 60) -> int:
    """The first minute shown: ``minutes`` whole minutes ending with the current one."""
    return (now // MINUTE_MS - (minutes - 1)) * MINUTE_MS


def per_minute(buckets: Sequence[ThroughputBucket], since: int, minutes: int = 60) -> list[Minute]:
    """One :class:`Minute` per minute from ``since`` on (kinds added up; gaps are zeros)."""
    sums: dict[int, list[int]] = {}
    for bucket in buckets:
        row = sums.setdefault(bucket.minute, [0, 0, 0])
        row[0] += bucket.succeeded
        row[1] += bucket.retried
        row[2] += bucket.dead_lettered
    result = []
    for index in range(minutes):
        start = since + index * MINUTE_MS
        values = sums.get(start, [0, 0, 0])
        result.append(Minute(start, *values))
    return result


def _clock(ms: int) -> str:
    return (_EPOCH + timedelta(milliseconds=ms)).strftime("%H:%M")


def _nice_ceiling(value: float, steps: Sequence[int] = (4, 8, 12, 16, 20, 40, 60, 80)) -> int:
    """The smallest "round" number at or above ``value`` from ``steps`` × 10^k (at least the
    first step), so the quarter grid lines of a count axis fall on whole numbers."""
    magnitude = 1
    while True:
        for step in steps:
            if step * magnitude >= value:
                return step * magnitude
        magnitude *= 10


@dataclass(frozen=True, slots=True)
class _Axes:
    """Where things go: a time axis over ``[since, since + span)`` and a value axis to ``top``."""

    since: int
    span: int
    top: float

    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM

    def x(self, instant: int) -> float:
        return LEFT + self.plot_w * (instant - self.since) / self.span

    def y(self, value: float) -> float:
        return TOP + self.plot_h - self.plot_h * min(value, self.top) / self.top

    def height(self, value: float) -> float:
        return self.plot_h * min(value, self.top) / self.top


def _frame(axes: _Axes, label: str, unit: str = "") -> list[str]:
    """The SVG element, grid lines, value labels and a tick every quarter hour."""
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for step in range(5):
        value = axes.top * step / 4
        y = axes.y(value)
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        if step in (0, 2, 4):
            parts.append(
                f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" '
                f'text-anchor="end">{value:g}{unit}</text>'
            )
    quarter = 15 * MINUTE_MS
    tick = -(-axes.since // quarter) * quarter
    base = TOP + axes.plot_h
    while tick < axes.since + axes.span:
        x = axes.x(tick)
        parts.append(
            f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 4}"/>'
            f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="middle">'
            f"{_clock(tick)}</text>"
        )
        tick += quarter
    return parts


def _empty(parts: list[str]) -> None:
    parts.append(
        f'<text class="empty" x="{LEFT + _Axes.plot_w / 2}" y="{TOP + _Axes.plot_h / 2}" '
        'text-anchor="middle">no settlements in this hour</text>'
    )


def throughput_chart(minutes: Sequence[Minute]) -> Markup:
    """Stacked bars: succeeded, retried and dead-lettered settlements per minute."""
    total = sum(m.total for m in minutes)
    label = (
        f"Settlements per minute over the last {len(minutes)} minutes: {total} in all, "
        f"{sum(m.succeeded for m in minutes)} succeeded, {sum(m.retried for m in minutes)} "
        f"retried, {sum(m.dead_lettered for m in minutes)} dead-lettered"
    )
    since = minutes[0].start if minutes else 0
    axes = _Axes(since, max(len(minutes), 1) * MINUTE_MS, _nice_ceiling(max(
        (m.total for m in minutes), default=0)))  # fmt: skip
    slot = axes.plot_w / max(len(minutes), 1)
    bar = max(slot * 0.72, 1.0)
    parts = _frame(axes, label)
    for minute in minutes:
        if minute.total == 0:
            continue
        x = axes.x(minute.start) + (slot - bar) / 2
        base = axes.y(0)
        tip = (
            f"{_clock(minute.start)} UTC — {minute.succeeded} succeeded, {minute.retried} retried,"
            f" {minute.dead_lettered} dead-lettered"
        )
        parts.append(f"<g><title>{escape(tip)}</title>")
        for css, value in (
            ("c-ok", minute.succeeded),
            ("c-retry", minute.retried),
            ("c-dead", minute.dead_lettered),
        ):
            if value == 0:
                continue
            height = axes.height(value)
            base -= height
            parts.append(
                f'<rect class="{css}" x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" '
                f'height="{height:.1f}"/>'
            )
        parts.append("</g>")
    if total == 0:
        _empty(parts)
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every interpolated text is escaped above


FAILURE_BIN_MS = 5 * MINUTE_MS


def failure_bins(minutes: Sequence[Minute]) -> list[tuple[int, int, int, int]]:
    """``(start, end, failed, total)`` per five clock minutes (the first and last may be cut
    short by the window): one minute's handful of settlements is too noisy to read a rate from."""
    bins: dict[int, list[int]] = {}
    for minute in minutes:
        key = minute.start // FAILURE_BIN_MS * FAILURE_BIN_MS
        row = bins.setdefault(key, [minute.start, minute.start + MINUTE_MS, 0, 0])
        row[1] = minute.start + MINUTE_MS
        row[2] += minute.failed
        row[3] += minute.total
    return [(row[0], row[1], row[2], row[3]) for _, row in sorted(bins.items())]


def failure_chart(minutes: Sequence[Minute]) -> Markup:
    """The share of settlements that failed (retried or dead-lettered) per five minutes, in
    percent; spans without settlements are left empty, not drawn as zero."""
    settled = sum(m.total for m in minutes)
    failed = sum(m.failed for m in minutes)
    overall = 0.0 if settled == 0 else 100 * failed / settled
    label = (
        f"Failure rate per five minutes over the last {len(minutes)} minutes: "
        f"{overall:.1f}% of {settled} settlements failed"
    )
    bins = failure_bins(minutes)
    peak = max((100 * f / t for _, _, f, t in bins if t), default=0.0)
    top = 100 if peak > 50 else _nice_ceiling(max(peak, 1), steps=(5, 10, 20, 25, 50))
    since = minutes[0].start if minutes else 0
    axes = _Axes(since, max(len(minutes), 1) * MINUTE_MS, top)
    parts = _frame(axes, label, unit="%")
    for start, end, bad, total in bins:
        if total == 0:
            continue
        rate = 100 * bad / total
        left, right = axes.x(start), axes.x(end)
        width = max(right - left - 3, 1.0)
        height = max(axes.height(rate), 1.5)  # a hairline marks "settled, none failed"
        tip = f"{_clock(start)}–{_clock(end)} UTC — {rate:.1f}% failed ({bad} of {total})"
        css = "c-rate-bar" if bad else "c-rate-zero"
        parts.append(
            f'<rect class="{css}" x="{left + 1.5:.1f}" y="{axes.y(0) - height:.1f}" '
            f'width="{width:.1f}" height="{height:.1f}"><title>{escape(tip)}</title></rect>'
        )
    if settled == 0:
        _empty(parts)
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every interpolated text is escaped above
