"""What a handler reports with ``ctx.progress`` (issue 32), as stored on its occurrence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Progress"]


@dataclass(frozen=True, slots=True)
class Progress:
    """What a handler last reported with ``ctx.progress(done, total, message)``: ``done`` of
    ``total`` (``None``: unknown), a short ``message``, the ``attempt`` that reported it and
    when (``at``, epoch ms)."""

    done: int | float
    total: int | float | None
    message: str | None
    attempt: int
    at: int

    @property
    def fraction(self) -> float | None:
        """``done / total`` clamped to 0..1, or ``None`` without a total."""
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))

    def text(self) -> str:
        """``3 of 10 (30%) — charging, attempt 2``, for people."""

        def number(value: int | float) -> str:
            return f"{value:g}" if isinstance(value, float) else str(value)

        text = number(self.done)
        if self.total is not None:
            text += f" of {number(self.total)}"
            if self.fraction is not None:
                text += f" ({self.fraction:.0%})"
        if self.message:
            text += f" — {self.message}"
        return f"{text}, attempt {self.attempt}"

    def to_json(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "total": self.total,
            "message": self.message,
            "attempt": self.attempt,
            "at": self.at,
        }
