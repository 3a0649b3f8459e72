"""Fuzz suite hooks: report how many inputs were generated and how many were uncoded."""

from __future__ import annotations

import json
import os

import pytest

from .support import COUNTS, LONG, SURVEYED, UNCODED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not COUNTS:
        return
    total = sum(n for area, n in COUNTS.items() if not area.startswith(("known-bug:", "corrupt.")))
    terminalreporter.write_line(
        f"fuzz ({'long' if LONG else 'short'}): {total} generated inputs, "
        f"{len(UNCODED)} uncoded exceptions; by area: {dict(sorted(COUNTS.items()))}"
    )
    for where, message in sorted(SURVEYED.items()):
        terminalreporter.write_line(f"uncoded: {where}: {message}")
    path = os.environ.get("JOBLEDGER_FUZZ_REPORT")
    if path:
        with open(path, "w") as out:
            json.dump({"total": total, "by_area": dict(COUNTS), "uncoded": UNCODED}, out, indent=2)
