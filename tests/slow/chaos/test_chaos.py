"""The kill harness in its CI size: one seeded short run per store
(``tests/slow/chaos/harness.py``).

The long run is one command (``python -m tests.slow.chaos.run --long``, or ``JOBLEDGER_CHAOS=long``
here); ``JOBLEDGER_CHAOS_SEED`` picks another seed. Every run prints its report.

The session-cut run (PostgreSQL) cuts a live worker's sessions at cadences of 0.2–2 s: the
``cuts`` preset here (about half a minute), ``cuts-long`` (3.5 minutes of cuts) with
``JOBLEDGER_CHAOS=long`` or ``python -m tests.slow.chaos.run --store postgres --cuts-long``.

The clock-step run steps live workers' store clocks 2 h forward and 1 h back, three cycles here
(about 25 s on SQLite), 24 with ``JOBLEDGER_CHAOS=long`` (``--clock-long``).

The recovery run (``tests/slow/chaos/recovery.py``) kills workers holding buffered claims of
``max_attempts=1`` and ``on_lost_lease="adjudicate"`` jobs while a partition limit is removed
and restored: five kills here (seconds), thirty with ``JOBLEDGER_CHAOS=long``
(``--recovery-long``).
"""

from __future__ import annotations

import json
import os

import pytest

from .harness import ChaosConfig, run_chaos
from .pgcluster import ClusterUnavailable, find_pg_bin

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

PRESET = os.environ.get("JOBLEDGER_CHAOS", "short")
SEED = int(os.environ.get("JOBLEDGER_CHAOS_SEED", "20261130"))


@pytest.mark.timeout(900 if PRESET == "long" else 240)
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_sigkills_lose_nothing_and_settle_each_occurrence_once(store, tmp_path):
    if store == "postgres" and find_pg_bin() is None:
        pytest.skip("no PostgreSQL server binaries for a private cluster")
    config = ChaosConfig.preset(PRESET, store, SEED)
    try:
        report = run_chaos(config, tmp_path / "chaos")
    except ClusterUnavailable as exc:
        pytest.skip(f"cannot make a private PostgreSQL cluster: {exc}")
    shown = {k: v for k, v in report.items() if k not in ("config", "worker_summaries")}
    print(json.dumps({"store": store, **shown}, indent=2))
    assert report["problems"] == []
    assert report["kills"] == config.rounds
    assert report["held_at_kill"] > 0, "no kill landed while a worker held a lease"
    assert report["held_not_rerun"] == 0 or report["by_kind_status"].get("doomed:dead_letter")
    if store == "postgres":
        assert len(report["server_restarts"]) == len(config.restart_rounds)
    # Recovery comes from seeing the killed worker gone, not from waiting out its lease.
    assert report["kill_to_lease_ended"]["max_s"] < config.lease_s


@pytest.mark.timeout(900 if PRESET == "long" else 240)
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_kills_with_the_default_prefetch_never_dead_letter_or_adjudicate_unstarted_work(
    store, tmp_path
):
    """Issue 30 (1, 2, 5): workers with the default adaptive prefetch and fast handlers are
    SIGKILLed holding claims they never started — ``max_attempts=1`` jobs and
    ``on_lost_lease="adjudicate"`` jobs among them — while a partition limit is removed and
    restored every round. No dead letter and no adjudication case for work that never started;
    every outcome-unknown dead letter is a listed case; nothing held once no limit holds it."""
    if store == "postgres" and find_pg_bin() is None:
        pytest.skip("no PostgreSQL server binaries for a private cluster")
    config = ChaosConfig.preset("recovery-long" if PRESET == "long" else "recovery", store, SEED)
    try:
        report = run_chaos(config, tmp_path / "recovery")
    except ClusterUnavailable as exc:
        pytest.skip(f"cannot make a private PostgreSQL cluster: {exc}")
    shown = {k: v for k, v in report.items() if k not in ("config", "worker_summaries")}
    print(json.dumps({"store": store, **shown}, indent=2))
    assert report["problems"] == []
    assert report["kills"] == config.rounds
    # Never marked started (the store's knowledge; the mark is durable before a handler runs).
    assert report["dead_letters_never_started"] == 0
    assert report["adjudication_cases_never_started"] == 0
    assert report["adjudication_cases"] == report["outcome_unknown_dead_letters"]
    assert report["held_after_removal_max"] == 0
    # Removed in odd rounds, restored in even ones, and removed for good before the drain.
    assert report["limit_toggles"] == config.rounds + (config.rounds + 1) % 2
    assert report["held_under_limit_max"] > 0  # the limit did hold rows while it stood
    # The kills did land on buffered claims: given back unstarted, not dead-lettered.
    assert report["claims_given_back_never_started"].get("owner_gone", 0) > 0


@pytest.mark.timeout(900 if PRESET == "long" else 240)
def test_session_cuts_never_reap_or_rerun_under_a_live_holder(tmp_path):
    """Issue 17 (2): a worker whose sessions are cut again and again is alive; nobody may take
    it for gone, so no occurrence it holds runs again."""
    if find_pg_bin() is None:
        pytest.skip("no PostgreSQL server binaries for a private cluster")
    config = ChaosConfig.preset("cuts-long" if PRESET == "long" else "cuts", "postgres", SEED)
    try:
        report = run_chaos(config, tmp_path / "cuts")
    except ClusterUnavailable as exc:
        pytest.skip(f"cannot make a private PostgreSQL cluster: {exc}")
    shown = {k: v for k, v in report.items() if k not in ("config", "worker_summaries")}
    print(json.dumps({"store": "postgres", **shown}, indent=2))
    assert report["problems"] == []
    assert report["kills"] == 0
    cuts = report["session_cuts"]
    assert sorted(cuts, key=float) == [str(c) for c in config.session_cuts]
    # Every phase cut its victim's sessions, many times.
    assert all(phase["backends_terminated"] >= phase["cuts"] > 1 for phase in cuts.values())
    assert report["reaped_live_owner"] == {}
    assert report["reruns_while_holder_alive"] == {}
    assert report["reexecutions_after_crash"] == 0


@pytest.mark.timeout(900 if PRESET == "long" else 240)
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_clock_steps_under_live_workers(store, tmp_path):
    """Issue 17 (10): live workers' clocks step 2 h forward and 1 h back, nobody dies. SQLite:
    no lease of a live owner is taken over, nothing runs again under a live holder. PostgreSQL
    (the injected clock stands for the database's, seen by one worker): leases are judged on
    that clock alone, so takeovers are the documented outcome — fencing must still keep every
    occurrence settled once, nothing lost, no audit time going back."""
    if store == "postgres" and find_pg_bin() is None:
        pytest.skip("no PostgreSQL server binaries for a private cluster")
    config = ChaosConfig.preset("clock-long" if PRESET == "long" else "clock", store, SEED)
    try:
        report = run_chaos(config, tmp_path / "clock")
    except ClusterUnavailable as exc:
        pytest.skip(f"cannot make a private PostgreSQL cluster: {exc}")
    shown = {k: v for k, v in report.items() if k not in ("config", "worker_summaries")}
    print(json.dumps({"store": store, **shown}, indent=2))
    assert report["problems"] == []
    assert report["kills"] == 0
    # Four steps per cycle (forward, back, and each undone), each noticed by a stepped worker:
    # the offset reached jobledger's clock, not just a file.
    assert report["clock_steps"] == 4 * config.clock_steps
    noticed = report["clock_steps_noticed"]
    assert len(noticed) == config.workers
    assert all(
        {s["direction"] for s in steps} == {"forward", "backward"} for steps in noticed.values()
    )
    # The steps exposed leases to takeover: other workers' leases when one stepped forward.
    assert report["clock_exposure"]["others_leases_at_forward_step"] > 0
    assert report["duplicate_job_trigger_keys"] == 0
    if store == "sqlite":
        assert report["taken_over_from_live_owner"] == {}
        assert report["reruns_while_holder_alive"] == {}
        assert report["reaped_live_owner"] == {}
        assert report["duplicated_side_effects"] == 0
        assert report["leases_lost_by_live_workers"] == {}
