"""A Hypothesis state machine: random lifecycles against a small pure-Python model (§2.7).

Every example works in its own namespace — its own job ids and job kind, and claim_next always
filters on that kind — because all examples of one test share the database that the
``store_factory`` fixture opened (Hypothesis runs many examples inside one test function).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from jobledger import derive_occurrence_identity

from .helpers import raises_code

OWNERS = ("w1", "w2", "w3")
PAYLOADS = ("job", None, {"v": 1}, {"v": 2})  # "job" = no override


@dataclass
class ModelJob:
    id: str
    max_attempts: int
    enabled: bool = True
    revision: int = 1
    events: int = 1  # job_created


@dataclass
class ModelOccurrence:
    id: str
    job_id: str
    scheduled_for: int
    available_at: int
    max_attempts: int
    payload: object
    status: str = "queued"
    attempt: int = 0
    fence: int = 0
    owner: str | None = None
    expires: int | None = None
    events: int = 1  # occurrence_enqueued
    leases: list[tuple[str, int]] = field(default_factory=list)  # every (owner, fence) granted
    seen_fences: list[int] = field(default_factory=list)
    seq: int = 0  # insertion order (the reference breaks ties by id instead: SPEC §2)


def make_machine(store, clock):
    namespaces = itertools.count()

    class LifecycleMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.ns = f"ns{next(namespaces)}"
            self.kind = f"kind-{self.ns}"
            self.base = clock()
            self.jobs: list[ModelJob] = []
            self.occurrences: dict[str, ModelOccurrence] = {}
            self.by_identity: dict[tuple, str] = {}

        # -- helpers ---------------------------------------------------------------------

        def now(self):
            return clock()

        def job(self, job_id):
            return next(j for j in self.jobs if j.id == job_id)

        def pick(self, index, items):
            return items[index % len(items)]

        def lazy_dead_letter(self, now):
            for occ in self.occurrences.values():
                if (
                    occ.status == "running"
                    and occ.expires <= now
                    and occ.attempt >= occ.max_attempts
                ):
                    occ.status = "dead_letter"
                    occ.owner = None
                    occ.expires = None
                    occ.events += 1

        def claimable(self, occ, now):
            if not self.job(occ.job_id).enabled or occ.attempt >= occ.max_attempts:
                return False
            if occ.status in ("queued", "retry_wait"):
                return occ.available_at <= now
            return occ.status == "running" and occ.expires <= now

        def apply_claim(self, occ, owner, lease, now):
            occ.status = "running"
            occ.attempt += 1
            occ.fence += 1
            occ.owner = owner
            occ.expires = now + lease
            occ.events += 1
            occ.leases.append((owner, occ.fence))

        def lease_holds(self, occ, owner, fence, now):
            return (
                occ.status == "running"
                and occ.owner == owner
                and occ.fence == fence
                and occ.expires > now
            )

        def credentials(self, occ, choice):
            """(owner, fence): 0 = the current lease, 1 = another owner, 2 = a wrong fence,
            3 = the oldest lease ever granted (stale after a reclaim or a later claim)."""
            owner = occ.owner or "w1"
            fence = max(occ.fence, 1)
            if choice == 1:
                owner = next(o for o in OWNERS if o != owner)
            elif choice == 2:
                fence = fence - 1 if fence > 1 else fence + 1
            elif choice == 3 and occ.leases:
                owner, fence = occ.leases[0]
            return owner, fence

        def targets(self, only_running):
            everything = list(self.occurrences.values())
            return (self.running() if only_running else None) or everything

        def running(self):
            return [o for o in self.occurrences.values() if o.status == "running"]

        # -- rules -----------------------------------------------------------------------

        @initialize(attempts=st.lists(st.integers(1, 3), min_size=2, max_size=2))
        def create_jobs(self, attempts):
            for max_attempts in attempts:
                job_id = f"{self.ns}-job{len(self.jobs)}"
                store.create_job(
                    id=job_id,
                    kind=self.kind,
                    authority={"principal": {"type": "user", "id": "tester"}},
                    payload="job-payload",
                    max_attempts=max_attempts,
                )
                self.jobs.append(ModelJob(job_id, max_attempts))

        @rule(index=st.integers(0, 7), really=st.integers(0, 3))
        def toggle_enabled(self, index, really):
            job = self.pick(index, self.jobs)
            if job.enabled and really != 3:
                return  # disable rarely (Hypothesis favours small draws), re-enable always
            updated = store.update_job(
                job.id, expected_revision=job.revision, patch={"enabled": not job.enabled}
            )
            job.enabled = not job.enabled
            job.revision += 1
            job.events += 1
            assert updated.revision == job.revision

        @rule(
            index=st.integers(0, 7),
            offset=st.sampled_from([0, 0, 500, 2_000]),
            key=st.sampled_from(["a", "b"]),
            available_delta=st.sampled_from([None, -500, 0, 1_500]),
            payload=st.sampled_from(PAYLOADS),
        )
        def enqueue(self, index, offset, key, available_delta, payload):
            job = self.pick(index, self.jobs)
            scheduled = self.base + offset
            available = None if available_delta is None else scheduled + available_delta
            options = {} if payload == "job" else {"payload": payload}
            wanted_payload = "job-payload" if payload == "job" else payload
            identity = (job.id, job.revision, scheduled, key)
            call = lambda: store.enqueue_occurrence(  # noqa: E731
                job_id=job.id,
                scheduled_for=scheduled,
                trigger_key=key,
                available_at=available,
                **options,
            )
            if not job.enabled:
                self.expect_error("SCHEDULER_JOB_DISABLED", call)
                return
            existing = self.by_identity.get(identity)
            if existing is not None:
                occ = self.occurrences[existing]
                if occ.payload != wanted_payload:
                    self.expect_error("SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH", call)
                    return
                got = call()
                assert got.deduplicated is True
                assert got.id == existing
                return
            got = call()
            expected_id, _ = derive_occurrence_identity(
                job_id=job.id, job_revision=job.revision, scheduled_for=scheduled, trigger_key=key
            )
            assert got.deduplicated is False
            assert got.id == expected_id
            self.by_identity[identity] = got.id
            self.occurrences[got.id] = ModelOccurrence(
                id=got.id,
                job_id=job.id,
                scheduled_for=scheduled,
                available_at=scheduled if available is None else available,
                max_attempts=job.max_attempts,
                payload=wanted_payload,
                seq=len(self.occurrences),
            )

        @precondition(lambda self: self.occurrences)
        @rule(owner=st.sampled_from(OWNERS), lease=st.sampled_from([1_000, 2_000]))
        def claim_next(self, owner, lease):
            self.do_claim_next(owner, lease)

        def do_claim_next(self, owner, lease):
            now = self.now()
            self.lazy_dead_letter(now)
            candidates = [o for o in self.occurrences.values() if self.claimable(o, now)]
            candidates.sort(
                key=lambda o: (
                    o.expires if o.status == "running" else o.available_at,
                    o.scheduled_for,
                    o.id,
                )
            )
            got = store.claim_next(owner_id=owner, lease_ms=lease, job_kind=self.kind)
            if not candidates:
                assert got is None
                return None
            expected = candidates[0]
            assert got is not None
            assert got.id == expected.id
            self.apply_claim(expected, owner, lease, now)
            return expected

        @precondition(lambda self: self.occurrences)
        @rule(
            index=st.integers(0, 15),
            owner=st.sampled_from(OWNERS),
            lease=st.sampled_from([1_000, 2_000]),
        )
        def claim_occurrence(self, index, owner, lease):
            now = self.now()
            occ = self.pick(index, list(self.occurrences.values()))
            self.lazy_dead_letter(now)
            eligible = self.claimable(occ, now)
            got = store.claim_occurrence(occurrence_id=occ.id, owner_id=owner, lease_ms=lease)
            if not eligible:
                assert got is None
                return
            assert got is not None
            assert got.id == occ.id
            self.apply_claim(occ, owner, lease, now)
            assert store.history(occurrence_id=occ.id, limit=1)[0].data["targeted"] is True

        @precondition(lambda self: self.occurrences)
        @rule(
            index=st.integers(0, 15),
            only_running=st.sampled_from([True, True, True, False]),
            creds=st.sampled_from([0, 0, 0, 1, 2, 3]),
            lease=st.sampled_from([500, 1_000, 3_000]),
        )
        def renew(self, index, only_running, creds, lease):
            now = self.now()
            occ = self.pick(index, self.targets(only_running))
            owner, fence = self.credentials(occ, creds)
            call = lambda: store.renew(  # noqa: E731
                occurrence_id=occ.id, owner_id=owner, fence=fence, lease_ms=lease
            )
            if not self.lease_holds(occ, owner, fence, now):
                self.expect_error("SCHEDULER_LEASE_LOST", call)
                return
            got = call()
            occ.expires = max(occ.expires, now + lease)
            occ.events += 1
            assert got.lease_expires_at == occ.expires

        @precondition(lambda self: self.occurrences)
        @rule(
            index=st.integers(0, 15),
            only_running=st.sampled_from([True, True, True, False]),
            creds=st.sampled_from([0, 0, 0, 1, 2, 3]),
            outcome=st.sampled_from(["retryable", "succeeded", "retryable", "fatal"]),
            retry_delay=st.sampled_from([None, -100, 0, 700]),
        )
        def settle(self, index, only_running, creds, outcome, retry_delay):
            occ = self.pick(index, self.targets(only_running))
            self.do_settle(occ, creds, outcome, retry_delay)

        def do_settle(self, occ, creds, outcome, retry_delay):
            now = self.now()
            owner, fence = self.credentials(occ, creds)
            retry_at = None if retry_delay is None else now + retry_delay
            call = lambda: store.settle(  # noqa: E731
                occurrence_id=occ.id,
                owner_id=owner,
                fence=fence,
                outcome="succeeded" if outcome == "succeeded" else "failed",
                retryable=outcome != "fatal",
                retry_at=retry_at,
            )
            if not self.lease_holds(occ, owner, fence, now):
                self.expect_error("SCHEDULER_LEASE_LOST", call)
                return
            got = call()
            if outcome == "succeeded":
                occ.status = "succeeded"
            elif outcome == "retryable" and occ.attempt < occ.max_attempts:
                occ.status = "retry_wait"
                occ.available_at = now if retry_at is None else max(now, retry_at)
            else:
                occ.status = "dead_letter"
            occ.owner = None
            occ.expires = None
            occ.events += 1
            assert got.status == occ.status

        @precondition(lambda self: self.occurrences)
        @rule(index=st.integers(0, 15), wrong_fence=st.booleans(), any_status=st.booleans())
        def requeue(self, index, wrong_fence, any_status):
            everything = list(self.occurrences.values())
            dead = [o for o in everything if o.status == "dead_letter"]
            occ = self.pick(index, everything if any_status or not dead else dead)
            fence = occ.fence + 1 if wrong_fence else max(occ.fence, 1)
            call = lambda: store.requeue_dead_letter(  # noqa: E731
                occurrence_id=occ.id, expected_fence=fence, reason="model", actor="hypothesis"
            )
            if occ.status != "dead_letter" or occ.fence != fence:
                self.expect_error("SCHEDULER_REQUEUE_EVIDENCE_CONFLICT", call)
                return
            got = call()
            occ.status = "retry_wait"
            occ.available_at = self.now()
            occ.max_attempts = occ.attempt + 1
            occ.events += 1
            assert got.max_attempts == occ.max_attempts

        @rule(
            ms=st.sampled_from([None, 1_000, 250, 1, 0, 999, 5_000]),
            index=st.integers(0, 15),
            before=st.booleans(),
        )
        def advance(self, ms, index, before):
            """Move the clock by ``ms``, or (``None``) to exactly a live lease's expiry (or 1 ms
            before it). No precondition on purpose: which occurrence is running can depend on
            id tie-breaks, and ids differ between replays of an example."""
            if ms is not None:
                clock.advance(ms)
                return
            live = [o for o in self.running() if o.expires > clock()]
            if live:
                target = self.pick(index, live)
                clock.set(target.expires - (1 if before else 0))

        @precondition(lambda self: self.occurrences)
        @rule(
            owner=st.sampled_from(OWNERS),
            outcome=st.sampled_from(["retryable", "fatal", "succeeded"]),
        )
        def claim_and_settle(self, owner, outcome):
            """A worker's whole turn: claim the next occurrence and settle it at once."""
            claimed = self.do_claim_next(owner, 1_000)
            if claimed is not None:
                self.do_settle(claimed, 0, outcome, None)

        def expect_error(self, code, call):
            with raises_code(code):
                call()

        # -- invariants ------------------------------------------------------------------

        @invariant()
        def store_agrees_with_model(self):
            for occ in self.occurrences.values():
                stored = store.get_occurrence(occ.id)
                assert stored is not None
                assert (
                    stored.status,
                    stored.attempt,
                    stored.fence,
                    stored.lease_owner,
                    stored.lease_expires_at,
                    stored.max_attempts,
                ) == (occ.status, occ.attempt, occ.fence, occ.owner, occ.expires, occ.max_attempts)
                if stored.status in ("queued", "retry_wait"):
                    assert stored.available_at == occ.available_at
                assert stored.payload == occ.payload
                running = stored.status == "running"
                assert running == (stored.lease_owner is not None)
                assert running == (stored.lease_expires_at is not None)
                assert stored.is_terminal == (stored.settled_at is not None)
                assert stored.attempt <= stored.max_attempts
                assert not occ.seen_fences or stored.fence >= occ.seen_fences[-1]
                occ.seen_fences.append(stored.fence)
                if stored.status == "dead_letter" and stored.last_error is not None:
                    assert "code" in stored.last_error
                events = store.history(occurrence_id=occ.id, limit=200)
                assert len(events) == occ.events
                assert events[-1].type == "occurrence_enqueued"

        @invariant()
        def job_histories_match(self):
            for job in self.jobs:
                expected = job.events + sum(
                    o.events for o in self.occurrences.values() if o.job_id == job.id
                )
                assert len(store.history(job_id=job.id, limit=200)) == expected
                assert store.get_job(job.id).revision == job.revision

    return LifecycleMachine


def test_occurrence_lifecycle_matches_the_model(store, clock):
    machine = make_machine(store, clock)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=75,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            database=None,
        ),
    )
