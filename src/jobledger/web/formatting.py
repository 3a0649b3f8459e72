"""How values look on the pages: UTC instants with relative ages, durations, JSON, ids.

Every instant is shown in UTC (``2026-01-01 07:30:00 UTC``) with its age relative to the
store's "now" (``3 min ago``, ``in 2 h``), inside a ``<time datetime=…>`` element. Pure
functions; the Jinja environment (``app.py``) exposes them as filters and globals.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from markupsafe import Markup, escape

from ..contract import escape_surrogates
from ..durations import epoch_ms_from

__all__ = [
    "STATUS_LABELS",
    "age",
    "breakable",
    "duration",
    "epoch_ms",
    "iso",
    "local_time",
    "pretty_json",
    "short_id",
    "status_label",
    "utc",
    "when",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STATUS_LABELS = {
    "queued": "queued",
    "running": "running",
    "retry_wait": "retry wait",
    "succeeded": "succeeded",
    "dead_letter": "dead letter",
    "cancelled": "cancelled",
}


def _moment(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def utc(ms: int | None) -> str:
    """``2026-01-01 07:30:00 UTC`` (``—`` for ``None``)."""
    if ms is None:
        return "—"
    return _moment(ms).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(ms: int) -> str:
    """``2026-01-01T07:30:00.000Z``, for ``<time datetime>`` and JSON."""
    return _moment(ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(ms: int) -> str:
    """A short human duration: ``250 ms``, ``12 s``, ``5 min``, ``2 h 5 min``, ``3 d 4 h``."""
    ms = abs(int(ms))
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {seconds} s" if seconds and minutes < 10 else "")
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")


def age(ms: int | None, now: int) -> str:
    """``3 min ago``, ``in 2 h``, ``just now`` — relative to ``now``."""
    if ms is None:
        return ""
    delta = now - ms
    if abs(delta) < 1000:
        return "just now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(delta)}"


def when(ms: int | None, now: int) -> Markup:
    """An instant as ``<time>`` with its relative age beside it."""
    if ms is None:
        return Markup('<span class="muted">—</span>')
    return Markup(
        '<time datetime="{iso}" title="{iso}">{utc}</time> <span class="age">{age}</span>'
    ).format(iso=iso(ms), utc=utc(ms), age=age(ms, now))


def epoch_ms(moment: datetime | None) -> int | None:
    """An aware datetime as epoch milliseconds (exact)."""
    return None if moment is None else epoch_ms_from(moment, "instant")


def local_time(ms: int, zone: str) -> str:
    """``Thu 02:30 EST`` — an instant as the wall time of a schedule's zone."""
    from ..schedules.zones import load_zone

    return _moment(ms).astimezone(load_zone(zone)).strftime("%a %H:%M %Z")


def pretty_json(value: Any) -> str:
    """Indented JSON with sorted keys; integers stay exact (no float rounding); a lone
    surrogate as its escape (the page is UTF-8)."""
    return escape_surrogates(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


_BREAK_AFTER = re.compile(r"(?<=[/._:@])")


def breakable(value: str) -> Markup:
    """``value`` escaped, with a line-break opportunity (``<wbr>``) after each ``/ . _ : @``.

    Long identifiers (``reports/daily-revenue``, ``worker-7f3a:host-a``) then wrap at their
    punctuation (browsers already break after ``-``) instead of letter by letter, which is what
    ``overflow-wrap: anywhere`` does in a narrow table column.
    """
    return Markup("<wbr>").join(_BREAK_AFTER.split(value))  # join escapes every part


def short_id(value: str, keep: int = 16) -> str:
    """``occ_203c235f49ca…`` — long ids shortened for tables (the full id goes in ``title``)."""
    return value if len(value) <= keep + 1 else value[:keep] + "…"


def status_label(status: str) -> str:
    return STATUS_LABELS.get(status, status.replace("_", " "))


def badge(status: str) -> Markup:
    """A coloured status pill."""
    return Markup('<span class="badge badge-{cls}">{label}</span>').format(
        cls=escape(status), label=status_label(status)
    )
