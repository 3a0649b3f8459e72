"""The kill harness's recovery scenario (issue 30 items 1, 2 and 5): what a SIGKILL costs work a
worker claimed ahead, and partition limits removed and restored while workers run.

Enabled by ``ChaosConfig.once`` / ``charges`` / ``limited`` (the ``recovery`` presets), on top of
the ordinary run (which stays checked as usual):

* ``once`` — ``max_attempts=1`` jobs (what an application picks for "never retry": a message,
  a charge), fast handlers (0–3 ms) so the default adaptive prefetch keeps many claims in each
  worker's buffer when it is killed. A crash must never dead-letter one whose handler did not
  start: every ``once`` dead letter must have a handler start recorded at its final fence;
* ``charge`` — ``on_lost_lease="adjudicate"`` jobs: a lost *started* attempt is an
  outcome-unknown dead letter waiting for an operator. Every such dead letter must be listed as
  an adjudication case (``Store.adjudication_cases``) saying when its handler began, and no case
  may be for an attempt whose handler never started;
* ``limited`` — ``work`` occurrences in queue ``limited`` over a few partitions whose
  ``partition_concurrency=1`` is declared and removed again every round while workers run.
  Right after every removal no row of the queue may be held (nothing held once no limit holds
  it); while the limit stands, held rows are counted (the proof the limit did hold some).

The side effects (``start``/``end`` lines keyed by occurrence and fence) come from the handlers,
outside the store, as for every other kind.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import jobledger

if TYPE_CHECKING:
    from .checks import Evidence
    from .harness import Harness

LIMITED_QUEUE = "limited"
PARTITIONS = 4
OUTCOME_UNKNOWN = "SCHEDULER_OUTCOME_UNKNOWN"
# A charge runs long enough (ms) that a kill often lands while one runs: a lost started attempt.
CHARGE_MS = (50, 300)


def seed(harness: Harness, app: jobledger.App) -> None:
    """The scenario's jobs and backlog (nothing when the config asks for none)."""
    config = harness.config
    if config.once:
        app.ensure_job("once", "once", max_attempts=1)
        harness.enqueue(
            app, "once", [{"ms": harness.rng.randint(0, 3)} for _ in range(config.once)]
        )
    if config.charges:
        app.ensure_job("charge", "charge", max_attempts=3, on_lost_lease="adjudicate")
        harness.enqueue(app, "charge", _sleeps(harness, config.charges, *CHARGE_MS))
    if config.limited:
        app.queue(LIMITED_QUEUE, partition_concurrency=1)
        harness.limits_on = True
        app.ensure_job("limited", "work", max_attempts=32, queue=LIMITED_QUEUE)
        enqueue_limited(harness, app, config.limited)


def before_round(harness: Harness, app: jobledger.App) -> None:
    """Every worker running (a replacement too), then a round's share of fresh work, so the kill
    that ends the round finds the victim's buffer full of claims it has not started."""
    config = harness.config
    if not (config.once or config.charges):
        return
    harness.wait_until_running()
    share = max(1, config.rounds)
    harness.enqueue(app, "once", _sleeps(harness, config.once // share, 0, 3))
    harness.enqueue(app, "charge", _sleeps(harness, config.charges // share, *CHARGE_MS))


def _sleeps(harness: Harness, n: int, low: int, high: int) -> list[dict[str, int]]:
    return [{"ms": harness.rng.randint(low, high)} for _ in range(n)]


def enqueue_limited(harness: Harness, app: jobledger.App, n: int) -> None:
    payloads = harness.work(n)
    partitions = [f"p{index % PARTITIONS}" for index in range(n)]
    occurrences = app.enqueue_many("limited", payloads, partitions=partitions)
    for occurrence in occurrences:
        harness.log.enqueued[occurrence.id] = "limited"


def toggle_limits(harness: Harness, app: jobledger.App) -> None:
    """Remove the partition limit if it stands, else restore it (and add work under it);
    right after a removal, nothing of the queue may be held."""
    if not harness.config.limited:
        return
    log = harness.log
    if harness.limits_on:
        before = _held(app)
        app.queue(LIMITED_QUEUE)
        harness.limits_on = False
        held = _held(app)
        log.limit_toggles.append({"limit": "removed", "held_before": before, "held_after": held})
        if held:
            log.recovery_problems.append(
                f"{held} row(s) held after the partition limit was removed"
            )
    else:
        app.queue(LIMITED_QUEUE, partition_concurrency=1)
        harness.limits_on = True
        enqueue_limited(harness, app, harness.config.limited // 2)
        log.limit_toggles.append({"limit": "restored"})


def finish_limits(harness: Harness, app: jobledger.App) -> None:
    """Before the final drain: no limit any more (checked like any removal)."""
    if harness.config.limited and harness.limits_on:
        toggle_limits(harness, app)


def _held(app: jobledger.App) -> int:
    for attempt in range(40):  # the server may be restarting
        try:
            [depth] = app.store.queue_depths(names=[LIMITED_QUEUE])
            return depth.held
        except jobledger.SchedulerError as exc:
            if exc.code != "SCHEDULER_STORAGE_UNAVAILABLE" or attempt == 39:
                raise
            time.sleep(0.25)
    raise AssertionError("unreachable")


def check(harness: Harness, evidence: Evidence) -> tuple[list[str], dict[str, Any]]:
    """The scenario's promises (see the module docstring) and its figures."""
    config = harness.config
    problems = list(harness.log.recovery_problems)
    facts: dict[str, Any] = {}
    if not (config.once or config.charges or config.limited):
        return problems, facts
    # The handler's own record of its start (its first line), and the store's: the start mark,
    # durable before the handler runs (``occurrence_started``, at the attempt's fence).
    began: dict[tuple[str, int], int] = {}
    for effect in evidence.effects:
        if effect["e"] == "start":
            began.setdefault((effect["occ"], effect["fence"]), effect["w"])
    marked: dict[tuple[str, int], int] = {
        (event["occurrence_id"], event["fence"]): event["occurred_at"]
        for trail in evidence.events.values()
        for event in trail
        if event["event_type"] == "occurrence_started"
    }
    dead: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for occurrence in evidence.occurrences.values():
        if occurrence["status"] == "dead_letter":
            dead[occurrence["kind"]].append(occurrence)
        elif occurrence["kind"] in ("once", "charge") and occurrence["status"] != "succeeded":
            problems.append(
                f"{occurrence['occurrence_id']} ({occurrence['kind']}) ended {occurrence['status']}"
            )
    lost = [o for kind in ("once", "charge") for o in dead[kind] if _code(o) != "doomed"]
    # A claim whose handler starts at once is marked started by the claim itself (no
    # occurrence_started event): the dead letter's own started_at, which dead-lettering leaves
    # as it was, is that mark.
    for occurrence in lost:
        if occurrence.get("started_at") is not None:
            key = (occurrence["occurrence_id"], occurrence["fence"])
            marked.setdefault(key, int(occurrence["started_at"]))
    never_started = [o for o in lost if (o["occurrence_id"], o["fence"]) not in marked]
    for occurrence in never_started:
        problems.append(
            f"{occurrence['occurrence_id']} ({occurrence['kind']}) dead-lettered "
            f"({_code(occurrence)}) though it was never marked started (fence "
            f"{occurrence['fence']})"
        )
    # Marked started, but the kill landed before the handler's first line: the store cannot
    # tell (the mark must be durable before the handler runs), so these count as started.
    mark_only = [
        o
        for o in lost
        if (o["occurrence_id"], o["fence"]) in marked
        and (o["occurrence_id"], o["fence"]) not in began
    ]
    with jobledger.open_store(harness.target) as store:
        cases = {case.occurrence_id: case for case in store.adjudication_cases(limit=500)}
    unknown = [o for kinds in dead.values() for o in kinds if _code(o) == OUTCOME_UNKNOWN]
    for occurrence in unknown:
        case = cases.get(occurrence["occurrence_id"])
        if case is None or case.fence != occurrence["fence"]:
            problems.append(f"{occurrence['occurrence_id']}: outcome unknown but no case listed")
        elif getattr(case, "started_at", None) is None:
            problems.append(f"{occurrence['occurrence_id']}: its case does not say when it began")
    unstarted_cases = [
        case for case in cases.values() if (case.occurrence_id, case.fence) not in marked
    ]
    for case in unstarted_cases:
        problems.append(f"{case.occurrence_id}: an adjudication case for an attempt never started")
    scenario = _kinds(evidence, ("once", "charge"))
    gaps = sorted(
        began[key] - at for key, at in marked.items() if key in began and key[0] in scenario
    )

    # Claims given back without spending an attempt, by why: owner_gone (a killed worker's
    # buffer), worker_shutdown (a graceful stop's), ...
    released_unstarted = Counter(
        str(event["data"].get("reason"))
        for trail in evidence.events.values()
        for event in trail
        if event["event_type"] == "occurrence_released" and event["data"].get("started") is False
    )
    toggles = harness.log.limit_toggles
    facts.update(
        {
            "once_dead_letters": len(dead["once"]),
            "charge_dead_letters": len(dead["charge"]),
            "dead_letters_never_started": len(never_started),
            "dead_letters_marked_not_begun": len(mark_only),
            "mark_to_handler_ms": _spread(gaps),
            "outcome_unknown_dead_letters": len(unknown),
            "adjudication_cases": len(cases),
            "adjudication_cases_never_started": len(unstarted_cases),
            "adjudication_cases_marked_not_begun": sum(
                1 for case in cases.values() if (case.occurrence_id, case.fence) not in began
            ),
            "claims_given_back_never_started": dict(sorted(released_unstarted.items())),
            "limit_toggles": len(toggles),
            # Held just before a removal: the limit did hold rows while it stood.
            "held_under_limit_max": max(
                (t["held_before"] for t in toggles if t["limit"] == "removed"), default=0
            ),
            "held_after_removal_max": max(
                (t["held_after"] for t in toggles if t["limit"] == "removed"), default=0
            ),
        }
    )
    return problems, facts


def _code(occurrence: dict[str, Any]) -> str | None:
    text = occurrence.get("last_error_json")
    return None if not text else json.loads(text).get("code")


def _kinds(evidence: Evidence, kinds: tuple[str, ...]) -> set[str]:
    return {o["occurrence_id"] for o in evidence.occurrences.values() if o["kind"] in kinds}


def _spread(values: list[int]) -> dict[str, Any]:
    """Median, p99 and max of sorted ``values``."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": values[len(values) // 2],
        "p99": values[int(0.99 * (len(values) - 1))],
        "max": values[-1],
    }
