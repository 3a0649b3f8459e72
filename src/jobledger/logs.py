"""Structured logs: one JSON object per line, with the attempt's identity on every record.

jobledger logs through the standard :mod:`logging` module (loggers ``jobledger.*``) and never
configures logging itself, except in the ``jobledger`` command. Records about an attempt carry
``occurrence_id``, ``job_id``, ``kind``, ``attempt`` and ``fence`` as ``extra`` fields
(:func:`jobledger.engine.observe.attempt_fields`); :class:`JsonFormatter` writes them out, so a log
pipeline can follow one occurrence across workers and retries.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["ATTEMPT_FIELDS", "JsonFormatter", "configure_logging"]

ATTEMPT_FIELDS = ("occurrence_id", "job_id", "kind", "attempt", "fence")
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", <extra fields…>, "exception"?}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            # The record's own creation time, formatted: logging already read the clock.
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if _jsonable(value) else repr(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


class _TextFormatter(logging.Formatter):
    """Plain lines for people, with the attempt fields appended when present."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = [
            f"{key}={record.__dict__[key]}" for key in ATTEMPT_FIELDS if key in record.__dict__
        ]
        return f"{text} [{' '.join(fields)}]" if fields else text


def _jsonable(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))


def configure_logging(level: str = "INFO", *, json_lines: bool = False) -> None:
    """Send ``jobledger.*`` logs to stderr, as JSON lines or plain text (used by the CLI)."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if json_lines
        else _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger("jobledger")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
