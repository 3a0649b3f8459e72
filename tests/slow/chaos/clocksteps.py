"""Clock-step phases of the chaos harness: live workers' clocks jump, nobody dies.

Each worker of a clock-step run gets its store clock from an :class:`~.offset_clock.OffsetClock`
(the system clock plus an offset in ``<owner>.clock``, injected with ``App(clock=...)``). For
each of ``clock_steps`` cycles one live worker's clock steps forward (``clock_forward_ms``, 2 h)
and another's back (``clock_back_ms``, 1 h), both hold for ``clock_phase_s`` while more work is
enqueued (among it one handler per worker that outlasts the lease), then both step back to the
system clock (one more step each way); the third worker keeps the system clock throughout.
Nobody is killed and every worker stays alive until the graceful stop, so any lease taken over
(reclaimed, ended as ``owner_gone`` or dead-lettered as ``lease_expired``) before that stop was
taken from a live owner: the harness marks the last audit event written while every one of them
lived (:func:`mark_live_events`), and :func:`~.checks.verify` counts takeovers up to it.

What the mode means per store:

* **SQLite** — the store's clock is the process's, so this is the case that matters: a forward
  step past the lease expires every lease in the stepped worker's eyes (and a backward step
  leaves its own leases expiring, in everyone else's, while it still runs them). A claim must
  leave alone the expired leases of an owner whose liveness lock is held.
* **PostgreSQL** — without an injected clock the store reads the database server's clock, so a
  worker process's clock step changes nothing (there is nothing to step: jobledger reads no
  process clock for leases there). With the injected clock the stepped worker's *transactions*
  read it instead of the server's: that stands for a step of the database clock, seen by one
  worker. PostgreSQL judges leases on that clock alone (the liveness lock is not asked at a
  claim), so a forward step takes live leases over, fenced: the run then shows what fencing
  keeps (nothing lost, one settlement per occurrence, no audit time going back) and counts the
  takeovers and re-runs — it cannot show "no re-run under a live holder", and is not a faithful
  server step either (a real one moves every worker's clock at once).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import jobledger

from .offset_clock import write_offset

if TYPE_CHECKING:
    from .harness import Harness

HOUR_MS = 3_600_000


def clock_path(harness: Harness, owner: str) -> str:
    return str(harness.workdir / f"{owner}.clock")


def set_clock(harness: Harness, owner: str, offset_ms: int) -> None:
    """Step ``owner``'s clock to the system clock plus ``offset_ms``, and log the step."""
    from pathlib import Path

    previous = harness.clock_offsets.get(owner)
    write_offset(Path(clock_path(harness, owner)), offset_ms)
    harness.clock_offsets[owner] = offset_ms
    if previous is not None and previous != offset_ms:
        harness.log.clock_steps.append(
            {
                "owner": owner,
                "step_ms": offset_ms - previous,
                "offset_ms": offset_ms,
                "at_ms": jobledger.system_clock(),
            }
        )


def _count(harness: Harness, where: str) -> int:
    from .checks import read_rows

    rows = read_rows(harness, f"SELECT COUNT(*) AS n FROM occurrences WHERE {where}")
    return int(rows[0]["n"])


def step_clocks(harness: Harness, app: jobledger.App) -> None:
    """The clock-step cycles (see the module docstring), with what each step exposed: the
    leases of other live workers the forward-stepped one sees as expired at its step, and the
    leases of the backward-stepped one already expired on the system clock at the phase's end
    (it renews them from an hour ago, so renewals do not move them)."""
    config = harness.config
    for cycle in range(config.clock_steps):
        harness.check_alive()
        owners = sorted(harness.running)
        forward = owners[cycle % len(owners)]
        back = owners[(cycle + 1) % len(owners)]
        set_clock(harness, forward, config.clock_forward_ms)
        set_clock(harness, back, -config.clock_back_ms)
        exposed = {
            "others_leases_at_forward_step": _count(
                harness, f"status = 'running' AND lease_owner <> '{forward}'"
            )
        }
        harness.enqueue(app, "work", [{"ms": config.clock_slow_ms}] * len(harness.running))
        harness.enqueue(app, "work", harness.work(config.extra))
        time.sleep(config.clock_phase_s)
        harness.check_alive()
        exposed["back_leases_expired_at_phase_end"] = _count(
            harness,
            f"status = 'running' AND lease_owner = '{back}' "
            f"AND lease_expires_at < {jobledger.system_clock()}",
        )
        harness.log.clock_exposure.append(exposed)
        set_clock(harness, forward, 0)
        set_clock(harness, back, 0)
        time.sleep(config.clock_phase_s / 2)


def mark_live_events(harness: Harness) -> None:
    """Record the newest audit event written while every worker of the run still lived."""
    from .checks import read_rows

    rows = read_rows(harness, "SELECT MAX(event_id) AS newest FROM events")
    harness.log.live_through_event = int(rows[0]["newest"] or 0)


def stepped_summary(harness: Harness) -> dict[str, Any]:
    """What the workers themselves noticed: clock steps (their log warning and metric) and leases
    they lost, by owner."""
    noticed = {
        owner: summary.get("clock_steps_noticed", [])
        for owner, summary in harness.log.summaries.items()
        if summary.get("clock_steps_noticed")
    }
    lost = {
        owner: len(summary.get("leases_lost", []))
        for owner, summary in harness.log.summaries.items()
        if summary.get("leases_lost")
    }
    exposure = harness.log.clock_exposure
    return {
        "clock_steps_noticed": noticed,
        "leases_lost_by_live_workers": lost,
        "clock_exposure": {
            name: sum(phase[name] for phase in exposure)
            for name in ("others_leases_at_forward_step", "back_leases_expired_at_phase_end")
        },
    }


def clock_problems(harness: Harness, facts: dict[str, Any]) -> list[str]:
    """On SQLite a clock step must take nothing from a live owner (its liveness lock is held):
    every takeover, reap or re-run under a live holder is a broken promise. On PostgreSQL the
    injected clock stands for the database's, on which leases are judged alone: takeovers there
    are the documented outcome of a forward step, counted but not a failure."""
    if harness.config.store != "sqlite":
        return []
    problems = []
    for name in ("taken_over_from_live_owner", "reaped_live_owner", "reruns_while_holder_alive"):
        if facts.get(name):
            problems.append(f"clock steps: {name} {facts[name]}")
    return problems
