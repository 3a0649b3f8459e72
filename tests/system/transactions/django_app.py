"""The ``JOBLEDGER["APP"]`` of the Django contrib test (set by the test)."""

from __future__ import annotations

import jobledger

app: jobledger.App | None = None
