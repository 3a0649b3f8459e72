"""What a chaos run proves: the evidence read back and every promise checked against it.

:func:`read_evidence` reads the store's tables directly (occurrences, the audit log), the
side-effect file the handlers wrote, ``PRAGMA integrity_check`` and ``Store.verify()``;
:func:`verify` lists every violation; :func:`measure` computes the recovery figures.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jobledger

if TYPE_CHECKING:
    from .harness import Harness

SCHEDULES = {"tick-1s": 1_000, "tick-3s": 3_000}
TERMINAL = {"succeeded", "dead_letter", "cancelled"}
CLAIMS = {"occurrence_claimed", "occurrence_reclaimed"}
SETTLES = {
    "occurrence_succeeded",
    "occurrence_retry_scheduled",
    "occurrence_dead_lettered",
    "occurrence_released",
}


# -- reading the evidence ---------------------------------------------------------------------


@dataclass
class Evidence:
    occurrences: dict[str, dict[str, Any]]
    events: dict[str | None, list[dict[str, Any]]]  # by occurrence id (None: job-level), by id
    effects: list[dict[str, Any]]
    schedule_states: dict[str, Any]
    integrity: list[str]
    verify_ok: bool
    verify_failures: list[str]


def _rows_sqlite(path: str, sql: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql)]
    finally:
        conn.close()


def _rows_postgres(url: str, sql: str) -> list[dict[str, Any]]:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, row_factory=dict_row) as conn:
        conn.execute("SET search_path TO jobledger")
        return list(conn.execute(sql).fetchall())


def read_rows(harness: Harness, sql: str) -> list[dict[str, Any]]:
    """Rows of ``sql`` read straight from the run's store (read-only on SQLite)."""
    rows = _rows_postgres if harness.config.store == "postgres" else _rows_sqlite
    return rows(harness.target, sql)


def read_evidence(harness: Harness) -> Evidence:
    target = harness.target
    rows = _rows_postgres if harness.config.store == "postgres" else _rows_sqlite
    occurrences = {
        row["occurrence_id"]: row
        for row in rows(
            target,
            "SELECT occurrence_id, job_id, kind, trigger_key, scheduled_for, status, attempt, "
            "max_attempts, fence, lease_owner, last_error_json, result_json, started_at "
            "FROM occurrences",
        )
    }
    events: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for row in rows(
        target,
        "SELECT event_id, job_id, occurrence_id, event_type, occurred_at, owner_id, fence, "
        "data_json FROM events ORDER BY event_id",
    ):
        row["data"] = json.loads(row.pop("data_json") or "{}")
        events[row["occurrence_id"]].append(row)
    effects = (
        [json.loads(line) for line in harness.effects_path.read_text().splitlines() if line.strip()]
        if harness.effects_path.exists()
        else []
    )
    integrity: list[str] = []
    if harness.config.store == "sqlite":
        conn = sqlite3.connect(target, timeout=30)
        try:
            integrity = [row[0] for row in conn.execute("PRAGMA integrity_check")]
            integrity += [f"foreign key: {row}" for row in conn.execute("PRAGMA foreign_key_check")]
        finally:
            conn.close()
    else:
        integrity = ["ok"]
    with jobledger.open_store(target) as store:
        report = store.verify()
        states = {job_id: store.schedule_state(job_id) for job_id in SCHEDULES}
    failures = [f"{check.name}: {check.detail}" for check in report.checks if not check.ok]
    return Evidence(occurrences, events, effects, states, integrity, report.ok, failures)


# -- the checks -------------------------------------------------------------------------------


def _error_code(occurrence: dict[str, Any]) -> str | None:
    text = occurrence.get("last_error_json")
    return None if not text else json.loads(text).get("code")


def verify(harness: Harness, evidence: Evidence) -> tuple[list[str], dict[str, Any]]:
    """Every promise, checked against the store, its audit log and the side-effect file.

    * every occurrence is terminal, by policy: ``work``, ``flaky`` and schedule ticks
      succeeded; ``doomed`` ones are dead letters — the fatal ones with their handler's code,
      the others after their last attempt;
    * none lost: every occurrence the harness enqueued is in the store;
    * settlement exactly once, never by a stale fence: one ``occurrence_succeeded`` per
      succeeded occurrence, at its final fence, by the owner of the latest claim, matching a
      side effect recorded with that (occurrence, fence); every settle-type event carries the
      fence and owner of the claim before it;
    * a handler ran only under a real claim: every ``start`` side effect matches a claim event
      with the same (occurrence, fence, owner);
    * a claim of a running occurrence is always a reclaim (its lease had ended): after
      ``owner_gone`` (an ``occurrence_lease_expired`` event first) or a natural expiry;
    * a killed worker wrote nothing after its death;
    * (counted, for the runs that require none) leases taken from a live owner: ended as
      ``owner_gone`` before the owner was killed or asked to stop; and, in runs that mark the
      last event written while every worker lived (clock steps), every takeover up to it — a
      reclaim of a running occurrence, a lease ended, a final attempt dead-lettered as
      ``lease_expired``;
    * the audit log of one occurrence never goes back in time: ``occurred_at`` does not
      decrease from one event to the next (in the order they were written) — a lease the
      reaper ended is not renewed or settled later by a transaction that read an earlier clock;
    * every slot of every schedule planned exactly once: one occurrence per (job, trigger key),
      consecutive slots one interval apart up to ``planned_through``, gaps only where a
      ``schedule_slots_skipped`` event covers them;
    * ``PRAGMA integrity_check`` (SQLite) and ``Store.verify()`` pass.
    """
    problems: list[str] = []
    counts: Counter[str] = Counter()
    occurrences, events = evidence.occurrences, evidence.events
    kills = {kill.owner: kill for kill in harness.log.kills}
    live_through = harness.log.live_through_event

    def holder_lived(owner: str, event: dict[str, Any]) -> bool:
        """Whether ``owner`` was alive, not yet asked to stop, when ``event`` was written. With
        a live mark, by audit order: store instants are on the workers' (stepped) clocks."""
        if owner in kills:
            return False
        if live_through is not None:
            return int(event["event_id"]) <= live_through
        stopped_ms = harness.log.stops.get(owner)
        return stopped_ms is None or event["occurred_at"] < stopped_ms

    # -- terminal, by policy; none lost --------------------------------------------------
    for occurrence_id, kind in harness.log.enqueued.items():
        if occurrence_id not in occurrences:
            problems.append(f"lost: {kind} occurrence {occurrence_id} is not in the store")
    for occurrence in occurrences.values():
        status, kind = occurrence["status"], occurrence["kind"]
        counts[f"{kind}:{status}"] += 1
        if kind in ("work", "flaky", "tick") and status != "succeeded":
            problems.append(f"{occurrence['occurrence_id']} ({kind}) ended {status}")
        if kind == "doomed":
            code = _error_code(occurrence)
            if status != "dead_letter":
                problems.append(f"{occurrence['occurrence_id']} (doomed) ended {status}")
            elif code not in ("doomed", "lease_expired") and (
                occurrence["attempt"] != occurrence["max_attempts"]
            ):
                problems.append(
                    f"{occurrence['occurrence_id']} dead-lettered with {code} at attempt "
                    f"{occurrence['attempt']} of {occurrence['max_attempts']}"
                )

    # -- side effects, indexed --------------------------------------------------------------
    starts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ends: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for effect in evidence.effects:
        if effect["e"] == "start":
            starts[effect["occ"]].append(effect)
        else:
            ends[(effect["occ"], effect["fence"])].append(effect)
        kill = kills.get(effect["owner"])
        if kill is not None and effect["t"] > kill.at + 0.05:
            problems.append(f"{effect['owner']} recorded a side effect after it was killed")

    end_count = Counter(occ for (occ, _), recorded in ends.items() for _ in recorded)
    reexecutions: Counter[str] = Counter()
    overlaps = 0
    duplicated_effects = 0
    for occurrence_id, occurrence in occurrences.items():
        trail = events.get(occurrence_id, [])
        claim_by_fence: dict[int, dict[str, Any]] = {}
        latest_claim: dict[str, Any] | None = None
        previous: dict[str, Any] | None = None
        succeeded = []
        for event in trail:
            kind = event["event_type"]
            if previous is not None and event["occurred_at"] < previous["occurred_at"]:
                problems.append(
                    f"{occurrence_id}: {kind} at {event['occurred_at']} after "
                    f"{previous['event_type']} at {previous['occurred_at']}: time went back"
                )
            if kind == "occurrence_lease_expired" and event["data"].get("reason") == "owner_gone":
                if holder_lived(event["owner_id"], event):
                    counts[f"reaped_live_owner:{event['owner_id']}"] += 1
            if live_through is not None:
                # The holder of the lease: named by the event when it ends one (owner_id), by
                # the claim before it when it is a reclaim (whose owner_id is the new holder).
                if kind == "occurrence_lease_expired" and holder_lived(event["owner_id"], event):
                    counts[f"taken_live:lease_ended_{event['data'].get('reason')}"] += 1
                elif (
                    kind == "occurrence_reclaimed"
                    and latest_claim is not None
                    and (previous is None or previous["event_type"] != "occurrence_lease_expired")
                    and holder_lived(latest_claim["owner_id"], event)
                ):
                    counts["taken_live:reclaimed_expired_lease"] += 1
                elif (
                    kind == "occurrence_dead_lettered"
                    and event["data"].get("reason") == "lease_expired"
                    and holder_lived(event["owner_id"], event)
                ):
                    counts["taken_live:dead_lettered_lease_expired"] += 1
            if kind in CLAIMS:
                claim_by_fence[event["fence"]] = event
                if event["data"].get("previousStatus") == "running":
                    if kind != "occurrence_reclaimed":
                        problems.append(f"{occurrence_id}: a live lease was claimed ({event})")
                    elif previous is not None and previous["event_type"] == (
                        "occurrence_lease_expired"
                    ):
                        event["ended_by"] = "owner_gone"
                    else:
                        event["ended_by"] = "lease_expiry"
                else:
                    event["ended_by"] = {
                        "occurrence_retry_scheduled": "retry",
                        "occurrence_released": "released",
                    }.get(previous["event_type"] if previous is not None else "", "first")
                latest_claim = event
            elif kind in SETTLES:
                if kind == "occurrence_succeeded":
                    succeeded.append(event)
                # Written by whoever found the lease lost (a claim, the reaper), not its holder.
                lease_expired_dead_letter = kind == "occurrence_dead_lettered" and (
                    event["data"].get("error") or {}
                ).get("code") in ("lease_expired", "SCHEDULER_OUTCOME_UNKNOWN")
                if latest_claim is None or event["fence"] != latest_claim["fence"]:
                    problems.append(f"{occurrence_id}: {kind} by a stale fence {event['fence']}")
                elif (
                    not lease_expired_dead_letter and event["owner_id"] != latest_claim["owner_id"]
                ):
                    problems.append(
                        f"{occurrence_id}: {kind} by {event['owner_id']}, not the holder"
                    )
            previous = event
        if occurrence["status"] == "succeeded":
            if len(succeeded) != 1:
                problems.append(f"{occurrence_id}: {len(succeeded)} occurrence_succeeded events")
            else:
                final = succeeded[0]
                if final["fence"] != occurrence["fence"]:
                    problems.append(f"{occurrence_id}: succeeded at a fence that is not final")
                matching = [
                    e
                    for e in ends.get((occurrence_id, final["fence"]), [])
                    if e["owner"] == final["owner_id"]
                ]
                if not matching:
                    problems.append(f"{occurrence_id}: settled with no side effect at its fence")
        elif succeeded:
            problems.append(f"{occurrence_id}: occurrence_succeeded but {occurrence['status']}")
        # Handler runs: each under a claim; re-runs classified by how the lease before ended.
        runs = sorted(starts.get(occurrence_id, []), key=lambda e: e["t"])
        for index, run in enumerate(runs):
            claim = claim_by_fence.get(run["fence"])
            if claim is None or claim["owner_id"] != run["owner"]:
                problems.append(f"{occurrence_id}: handler ran at fence {run['fence']} unclaimed")
                continue
            if index == 0:
                continue
            ended_by = claim.get("ended_by", "?")
            reexecutions[ended_by] += 1
            prior = runs[index - 1]
            prior_end = ends.get((occurrence_id, prior["fence"]), [])
            if ended_by in ("owner_gone", "lease_expiry") and prior["owner"] not in kills:
                counts[f"rerun_while_holder_alive:{ended_by}"] += 1
            if any(end["t"] > run["t"] for end in prior_end):
                overlaps += 1
        duplicated_effects += max(0, end_count.get(occurrence_id, 0) - 1)

    # -- schedules ----------------------------------------------------------------------------
    by_job_key = Counter((o["job_id"], o["trigger_key"]) for o in occurrences.values())
    duplicates = [key for key, count in by_job_key.items() if count > 1]
    if duplicates:
        problems.append(f"{len(duplicates)} (job, trigger key) pairs with two occurrences")
    slots_planned = 0
    for job_id, interval in SCHEDULES.items():
        state = evidence.schedule_states.get(job_id)
        slots = sorted(o["scheduled_for"] for o in occurrences.values() if o["job_id"] == job_id)
        skipped: list[tuple[int, int]] = [
            (e["data"]["first"], e["data"]["last"])
            for e in events.get(None, [])
            if e["job_id"] == job_id and e["event_type"] == "schedule_slots_skipped"
        ]
        slots_planned += len(slots)
        if state is None or not slots:
            problems.append(f"schedule {job_id}: nothing planned")
            continue
        for earlier, later in zip(slots, slots[1:], strict=False):
            if later - earlier != interval and not any(
                first <= earlier + interval and last >= later - interval for first, last in skipped
            ):
                problems.append(f"schedule {job_id}: slots {earlier} and {later} leave a gap")
        newest = max([slots[-1], *(last for _, last in skipped)])
        if state.planned_through - newest >= interval:
            problems.append(
                f"schedule {job_id}: planned through {state.planned_through}, newest slot {newest}"
            )
        counts[f"skipped_runs:{job_id}"] = len(skipped)

    # -- integrity ----------------------------------------------------------------------------
    if evidence.integrity != ["ok"]:
        problems.append(f"integrity_check: {evidence.integrity[:5]}")
    if not evidence.verify_ok:
        problems.append(f"Store.verify(): {evidence.verify_failures}")
    problems.extend(harness.log.worker_failures)

    facts = {
        "occurrences": len(occurrences),
        "by_kind_status": dict(
            sorted(
                (k, v)
                for k, v in counts.items()
                if ":" in k and not k.startswith(("rerun", "skipped", "reaped", "taken_live"))
            )
        ),
        "reexecutions": dict(reexecutions),
        "reexecutions_after_crash": sum(
            v for k, v in reexecutions.items() if k in ("owner_gone", "lease_expiry")
        ),
        "reruns_while_holder_alive": {
            k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("rerun_while")
        },
        # Leases ended as "owner gone" before that owner was killed or asked to stop: a live
        # worker was taken for dead.
        "reaped_live_owner": {
            k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("reaped_live")
        },
        # Clock-step runs: every lease taken from an owner that was alive and not stopping.
        "taken_over_from_live_owner": {
            k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("taken_live")
        },
        "overlapping_executions": overlaps,
        "duplicated_side_effects": duplicated_effects,
        "schedule_slots_planned": slots_planned,
        "skipped_runs": {
            k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("skipped")
        },
        "duplicate_job_trigger_keys": len(duplicates),
    }
    return problems, facts


def measure(harness: Harness, evidence: Evidence) -> dict[str, Any]:
    """Time from each kill to the re-run of what the killed worker held (from side effects).

    For every kill, the occurrences the victim held — claimed (or reclaimed) by it and never
    settled or released by it — and, for each, the first handler start by another worker after
    the kill. ``in_handler`` counts those whose handler was running at the kill; the rest were
    buffered claims (prefetch) or results waiting for the group commit.
    """
    kills = {kill.owner: kill for kill in harness.log.kills}
    held: dict[str, list[tuple[str, int]]] = defaultdict(list)
    takeover_ms: list[int] = []
    for occurrence_id, trail in evidence.events.items():
        if occurrence_id is None:
            continue
        for index, event in enumerate(trail):
            if event["event_type"] in CLAIMS and event["owner_id"] in kills:
                later = trail[index + 1 :]
                settled_by_victim = any(
                    e["event_type"] in SETTLES
                    and e["owner_id"] == event["owner_id"]
                    and e["fence"] == event["fence"]
                    for e in later
                )
                if not settled_by_victim:
                    held[event["owner_id"]].append((occurrence_id, event["fence"]))
                    for e in later:
                        if (
                            e["event_type"] == "occurrence_lease_expired"
                            and e["fence"] == event["fence"]
                        ):
                            takeover_ms.append(e["occurred_at"] - kills[event["owner_id"]].at_ms)
                            break
    starts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    started_fences: set[tuple[str, int, str]] = set()
    ended_fences: set[tuple[str, int]] = set()
    for effect in evidence.effects:
        if effect["e"] == "start":
            starts[effect["occ"]].append(effect)
            started_fences.add((effect["occ"], effect["fence"], effect["owner"]))
        else:
            ended_fences.add((effect["occ"], effect["fence"]))
    rerun_s: list[float] = []
    in_handler_s: list[float] = []
    never = 0
    for owner, items in held.items():
        kill = kills[owner]
        for occurrence_id, fence in items:
            after = [s["t"] for s in starts.get(occurrence_id, []) if s["t"] > kill.at]
            if not after:
                never += 1  # e.g. a doomed occurrence dead-lettered by the claim that took it
                continue
            delay = min(after) - kill.at
            rerun_s.append(delay)
            if (occurrence_id, fence, owner) in started_fences and (
                occurrence_id,
                fence,
            ) not in ended_fences:
                in_handler_s.append(delay)

    def summary(values: list[float]) -> dict[str, Any]:
        if not values:
            return {"n": 0}
        return {
            "n": len(values),
            "median_s": round(statistics.median(values), 3),
            "p90_s": round(sorted(values)[int(0.9 * (len(values) - 1))], 3),
            "max_s": round(max(values), 3),
        }

    return {
        "kill_to_rerun": summary(rerun_s),
        "kill_to_rerun_in_handler": summary(in_handler_s),
        "kill_to_lease_ended": summary([v / 1000 for v in takeover_ms]),
        "held_at_kill": sum(len(items) for items in held.values()),
        "held_not_rerun": never,
    }
