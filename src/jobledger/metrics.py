"""Prometheus metrics: what a process did (an observer) and what the store holds (a collector).

Needs the optional ``prometheus-client`` package (``pip install 'jobledger[metrics]'``); nothing
in the core imports this module.

Two sources, because they answer different questions:

* :class:`PrometheusObserver` — an :class:`~jobledger.engine.observe.Observer` the runtime and
  worker call as things happen *in this process*: claims, reclaims, settlements by status, lost
  leases, handler durations, busy and stuck slots, planner lag. Counters start at zero when the
  process starts; Prometheus' ``rate``/``increase`` handle the restarts.
* :class:`StoreCollector` — reads the store *at scrape time*: queue depth by status and kind,
  the age of the oldest due occurrence per kind, leases held per owner, live workers. These are
  exact and shared by every process looking at the same store, so a fleet of workers exports the
  same values several times: aggregate them with ``max``, not ``sum``.

Series (Prometheus naming: one ``jobledger_`` prefix, base units, ``_total`` on counters)::

    jobledger_claims_total{kind}                      counter
    jobledger_reclaims_total{kind}                    counter (took over an expired lease)
    jobledger_settlements_total{kind,status}          counter (succeeded|retry_wait|dead_letter|
                                                               cancelled|aborted)
    jobledger_leases_lost_total{kind}                 counter
    jobledger_handler_duration_seconds{kind}          histogram
    jobledger_worker_slots_busy                       gauge
    jobledger_worker_stuck_slots                      gauge   (handlers past their time limit
                                                               that ignore cancellation)
    jobledger_clock_steps_total{direction}            counter (forward|backward: the store's
                                                               clock stepped, seen by a worker)
    jobledger_planner_lag_seconds                     histogram (now − slot, at enqueue)
    jobledger_planner_enqueued_total{kind}            counter
    jobledger_planner_skipped_runs_total              counter
    jobledger_occurrences{status,kind}                gauge   (collector: up to COUNT_CAP)
    jobledger_occurrences_capped{status,kind}         gauge   (collector: 1 where it stopped)
    jobledger_oldest_due_age_seconds{kind}            gauge   (collector)
    jobledger_store_kinds{state}                      gauge   (collector: shown|folded)
    jobledger_leases_held{owner}                      gauge   (collector)
    jobledger_workers{state}                          gauge   (collector: active|stale)
    jobledger_queue_depth{queue,state}                gauge   (collector: ready|waiting|held|
                                                               blocked)
    jobledger_queue_running{queue}                    gauge   (collector)
    jobledger_queue_paused{queue}                     gauge   (collector: 1 paused, 0 not)
    jobledger_queue_held_back{queue,reason}           gauge   (collector: held back by partition|
                                                               paused|concurrency|rate)
    jobledger_queue_limit{queue,limit}                gauge   (collector: declared limits)
    jobledger_store_queues{state}                     gauge   (collector: shown|folded)
    jobledger_store_up                                gauge   (collector: 1 if the read worked)
    jobledger_build_info{version,store,schema_version} gauge  (collector, always 1)
    jobledger_adjudication_cases_open                 gauge   (collector: outcome-unknown dead
                                                               letters awaiting a decision,
                                                               counted up to 500)

Label cardinality is bounded: ``kind`` by the handlers in code for the observer's series, and
for the collector's by a cap — only kinds with live work (``LIVE_STATUSES``) or dead
letters get series of their own, at most ``max_kinds`` (default 100) of them, ranked by live work;
every other kind is summed into ``kind="other"``, so totals by status stay exact however many
kinds a store has ever seen. ``queue`` likewise (``max_queues``, default 100; each queue count
stops at ``depth_cap`` rows, default 10,000). ``status`` and ``state`` are bounded by the state
machine, ``owner`` by the workers holding leases *right now* (a series disappears when its
owner's leases end; each worker start has a new owner id). Occurrence ids, job ids, payloads and
error texts never become labels.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .contract import LIVE_STATUSES
from .durations import ms_from_timedelta
from .engine.housekeeping import CLOCK_STEP_THRESHOLD
from .engine.observe import Observer
from .errors import InvalidArgument, SchedulerError
from .models import COUNT_CAP, DEPTH_CAP, MAX_CASES, WORKER_STALE_AFTER, Occurrence
from .planning.queue_stats import QUEUE_FAMILIES, kind_series, queue_series
from .store.base import Store
from .version import __version__

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

    from .models import RunResult

__all__ = [
    "DEFAULT_DURATION_BUCKETS",
    "DEFAULT_LAG_BUCKETS",
    "DEFAULT_MAX_KINDS",
    "OTHER_KIND",
    "MetricsServer",
    "MetricsService",
    "PrometheusObserver",
    "StoreCollector",
    "metrics_registry",
    "serve_metrics",
]

logger = logging.getLogger("jobledger.metrics")

# Job handlers run from milliseconds to hours: the client's default buckets (5 ms–10 s) are
# shaped for web requests and would put every slow job in +Inf.
DEFAULT_DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
)  # fmt: skip
DEFAULT_LAG_BUCKETS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
)  # fmt: skip
DEFAULT_STALE_AFTER = WORKER_STALE_AFTER
# The most kinds with series of their own in the store collector's per-kind families: 100 kinds
# are ~700 series; a store that has seen 2,000 kinds would otherwise export 14,000 per scrape.
DEFAULT_MAX_KINDS = 100
# The label the collector sums every other kind into (a real kind of that name is summed there).
OTHER_KIND = "other"
_UNKNOWN_KIND = "unknown"
# The settlement statuses a RunResult can carry; "idle" and "busy" mean nothing ran.
_NOT_RUN = frozenset({"idle", "busy"})


def _kind(occurrence: Occurrence) -> str:
    return occurrence.kind or _UNKNOWN_KIND


class PrometheusObserver(Observer):
    """Counts what a runtime or worker does, in ``registry`` (default: a new private
    :class:`~prometheus_client.CollectorRegistry`, so several observers in one process never
    clash; pass ``prometheus_client.REGISTRY`` to join the process-wide one).

    Pass it as ``observer=`` to :class:`~jobledger.Runtime`, :meth:`App.worker
    <jobledger.App.worker>` or :meth:`App.runtime <jobledger.App.runtime>`; serve it with
    :func:`serve_metrics` or the web app's ``/metrics``.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        duration_buckets: Sequence[float] = DEFAULT_DURATION_BUCKETS,
        lag_buckets: Sequence[float] = DEFAULT_LAG_BUCKETS,
    ) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        self.claims = Counter(
            "jobledger_claims",
            "Occurrences claimed by this process (reclaims included).",
            ["kind"],
            registry=self.registry,
        )
        self.reclaims = Counter(
            "jobledger_reclaims",
            "Claims that took over an occurrence whose previous lease had expired.",
            ["kind"],
            registry=self.registry,
        )
        self.settlements = Counter(
            "jobledger_settlements",
            "Attempts ended by this process, by resulting status "
            "(aborted: nothing settled, e.g. the lease was lost; snoozed: Snooze raised).",
            ["kind", "status"],
            registry=self.registry,
        )
        self.leases_lost = Counter(
            "jobledger_leases_lost",
            "Leases this process held that expired or were taken over before it settled.",
            ["kind"],
            registry=self.registry,
        )
        self.handler_duration = Histogram(
            "jobledger_handler_duration_seconds",
            "Time from an attempt's start to the end of its handler.",
            ["kind"],
            buckets=tuple(duration_buckets),
            registry=self.registry,
        )
        self.slots_busy = Gauge(
            "jobledger_worker_slots_busy",
            "Attempts running in this process now.",
            registry=self.registry,
        )
        self.stuck_slots = Gauge(
            "jobledger_worker_stuck_slots",
            "Worker slots held by a handler that ran past its time limit and ignores "
            "cancellation (its attempt is settled; the slot runs nothing until it returns).",
            registry=self.registry,
        )
        self.clock_steps = Counter(
            "jobledger_clock_steps",
            "Steps of the store's clock a worker of this process saw (its progress between two "
            "housekeeping passes differed from the monotonic clock's by more than "
            f"{CLOCK_STEP_THRESHOLD.total_seconds():g} s).",
            ["direction"],
            registry=self.registry,
        )
        self.planner_lag = Histogram(
            "jobledger_planner_lag_seconds",
            "How late a planner enqueued a schedule slot (now minus the slot's instant).",
            buckets=tuple(lag_buckets),
            registry=self.registry,
        )
        self.planner_enqueued = Counter(
            "jobledger_planner_enqueued",
            "Schedule slots enqueued by this process's planner.",
            ["kind"],
            registry=self.registry,
        )
        self.planner_skipped = Counter(
            "jobledger_planner_skipped_runs",
            "Runs of skipped schedule slots recorded by this process's planner "
            "(one run may cover many slots).",
            registry=self.registry,
        )
        # Attempts are keyed by (occurrence id, fence): a repeated hook cannot push the busy
        # gauge below zero, and a lost lease is counted once whichever hook reports it first.
        self._busy: set[tuple[str, int]] = set()
        self._lost: set[tuple[str, int]] = set()
        self._stuck: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    # -- Observer hooks ---------------------------------------------------------------------

    def claimed(self, occurrences: Sequence[Occurrence]) -> None:
        for occurrence in occurrences:
            kind = _kind(occurrence)
            self.claims.labels(kind).inc()
            if occurrence.reclaimed:
                self.reclaims.labels(kind).inc()

    def started(self, occurrence: Occurrence) -> None:
        with self._lock:
            self._busy.add((occurrence.id, occurrence.fence))
            self.slots_busy.set(len(self._busy))

    def finished(self, occurrence: Occurrence, result: RunResult, duration_s: float) -> None:
        key = (occurrence.id, occurrence.fence)
        with self._lock:
            self._busy.discard(key)
            self.slots_busy.set(len(self._busy))
            counted = key in self._lost
            self._lost.discard(key)
        if result.status in _NOT_RUN:
            return
        kind = _kind(occurrence)
        status: str = result.status
        settled = result.occurrence
        if status == "retry_wait" and settled is not None and settled.attempt < occurrence.attempt:
            status = "snoozed"  # the attempt was given back: waiting, not failing
        self.settlements.labels(kind, status).inc()
        self.handler_duration.labels(kind).observe(max(0.0, duration_s))
        if result.lease_lost and not counted:
            # A loss found by the final settle (not by a renewal) reaches only this hook.
            self.leases_lost.labels(kind).inc()

    def lease_lost(self, occurrence: Occurrence) -> None:
        key = (occurrence.id, occurrence.fence)
        with self._lock:
            if key in self._lost:
                return
            self._lost.add(key)
        self.leases_lost.labels(_kind(occurrence)).inc()

    def planned(self, enqueued: Sequence[Occurrence], skipped: int, now: int) -> None:
        for occurrence in enqueued:
            self.planner_enqueued.labels(_kind(occurrence)).inc()
            self.planner_lag.observe(max(0, now - occurrence.scheduled_for) / 1000)
        if skipped:
            self.planner_skipped.inc(skipped)

    def slot_stuck(self, occurrence: Occurrence) -> None:
        with self._lock:
            self._stuck.add((occurrence.id, occurrence.fence))
            self.stuck_slots.set(len(self._stuck))

    def slot_freed(self, occurrence: Occurrence) -> None:
        with self._lock:
            self._stuck.discard((occurrence.id, occurrence.fence))
            self.stuck_slots.set(len(self._stuck))

    def clock_stepped(self, direction: str, seconds: float) -> None:
        self.clock_steps.labels(direction).inc()


class StoreCollector(Collector):
    """Reads ``store`` at every scrape (through the :class:`~jobledger.Store` protocol only).

    Costs per scrape: ``count_occurrences`` (up to :data:`~jobledger.models.COUNT_CAP` per kind
    and status), ``oldest_due``, ``lease_holders``, ``list_workers`` and ``schema_info``. A
    worker is *active* when it has not stopped and was seen within ``stale_after`` (default
    60 s). When the store cannot be read, ``jobledger_store_up`` is 0 and nothing else is sent.

    Per-kind series are bounded (:meth:`shown_kinds`): a kind has its own while it has live work
    or dead letters, for at most ``max_kinds`` kinds; the rest are summed into
    ``kind="other"`` (:data:`OTHER_KIND`), and ``jobledger_store_kinds`` says how many kinds are
    shown and how many folded. Stateless: every process exporting one store exports the same.
    """

    def __init__(
        self,
        store: Store,
        *,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
        max_kinds: int = DEFAULT_MAX_KINDS,
        max_queues: int = DEFAULT_MAX_KINDS,
        depth_cap: int = DEPTH_CAP,
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidArgument("store must be a jobledger Store")
        if type(max_kinds) is not int or not 1 <= max_kinds <= 10_000:
            raise InvalidArgument(
                "max_kinds must be an integer from 1 to 10,000", details={"field": "max_kinds"}
            )
        self.store = store
        self.stale_after_ms = ms_from_timedelta(stale_after, "stale_after", minimum_ms=1)
        self.max_kinds = max_kinds
        for name, value, top in (
            ("max_queues", max_queues, 10**4),
            ("depth_cap", depth_cap, 10**6),
        ):
            if type(value) is not int or not 1 <= value <= top:
                raise InvalidArgument(f"{name} must be an integer from 1 to {top:,}")
        self.max_queues, self.depth_cap = max_queues, depth_cap

    def describe(self) -> Iterable[Metric]:
        # Names only, so registering does not read the store.
        return self._families()

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        [up] = [family for family in families if family.name == "jobledger_store_up"]
        try:
            self._fill(families)
        except SchedulerError:
            logger.warning("metrics: the store could not be read", exc_info=True)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return families

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily(
                "jobledger_occurrences",
                "Occurrences in the store by status and kind.",
                labels=["status", "kind"],
            ),
            GaugeMetricFamily(
                "jobledger_oldest_due_age_seconds",
                "How long the most overdue claimable occurrence of a kind has been due "
                "(0: nothing waiting).",
                labels=["kind"],
            ),
            GaugeMetricFamily(
                "jobledger_store_kinds",
                "Kinds in the store: with series of their own (shown) or summed into "
                'kind="other" (folded: nothing live and no dead letters, or over the cap).',
                labels=["state"],
            ),
            GaugeMetricFamily(
                "jobledger_leases_held",
                "Live leases per owner (bounded by the workers holding leases now).",
                labels=["owner"],
            ),
            GaugeMetricFamily(
                "jobledger_workers",
                "Workers not stopped, by whether they were seen recently (active) or not (stale).",
                labels=["state"],
            ),
            GaugeMetricFamily("jobledger_store_up", "1 if the last scrape could read the store."),
            *(
                GaugeMetricFamily(name, text, labels=labels)
                for name, text, labels in QUEUE_FAMILIES
            ),
            GaugeMetricFamily(
                "jobledger_build_info",
                "jobledger version, store type and schema version (always 1).",
                labels=["version", "store", "schema_version"],
            ),
            GaugeMetricFamily(
                "jobledger_adjudication_cases_open",
                "Occurrences whose outcome is unknown, waiting for an operator's decision "
                f"(SPEC §9; counted up to {MAX_CASES}).",
            ),
            GaugeMetricFamily(
                "jobledger_occurrences_capped",
                f"1 where jobledger_occurrences stopped at {COUNT_CAP}: at least that many.",
                labels=["status", "kind"],
            ),
        ]

    def shown_kinds(self, counts: dict[tuple[str, str], int]) -> list[str]:
        """The kinds with series of their own, by name, from ``{(status, kind): count}``.

        A kind whose occurrences have all succeeded or been cancelled has nothing to watch: it
        is folded into ``other``, so kinds used once stop costing series. Kinds with live work
        or dead letters (which wait for an operator) are ranked by live work, then dead letters,
        then name, and the first ``max_kinds`` are shown.
        """
        live: dict[str, int] = {}
        dead: dict[str, int] = {}
        for (status, kind), count in counts.items():
            if status in LIVE_STATUSES:
                live[kind] = live.get(kind, 0) + count
            elif status == "dead_letter":
                dead[kind] = dead.get(kind, 0) + count
        watched = {kind for kind in (*live, *dead) if live.get(kind) or dead.get(kind)}
        watched.discard(OTHER_KIND)  # a real kind of that name is summed into the bucket
        ranked = sorted(watched, key=lambda kind: (-live.get(kind, 0), -dead.get(kind, 0), kind))
        return sorted(ranked[: self.max_kinds])

    def _fill(self, families: list[GaugeMetricFamily]) -> None:
        occurrences, oldest, kinds_family, leases, workers, _up, *queues, build, cases, capped = (
            families
        )
        store = self.store
        now = store.now()
        rows = store.count_occurrences(cap=COUNT_CAP)  # one row per (kind, status)
        counts = {(row.status, row.kind): row.count for row in rows}
        kinds = {row.kind for row in rows}
        shown = self.shown_kinds(counts)
        shown_set = set(shown)
        folded = kinds - shown_set
        bounded = {(row.status, row.kind) for row in rows if row.capped}
        values, marks = kind_series(counts, bounded, shown, other=OTHER_KIND)
        for labels, value in values:
            occurrences.add_metric(labels, value)
        for labels in marks:
            capped.add_metric(labels, 1)
        due = {item.kind: item.due_at for item in store.oldest_due()}
        for kind in shown:
            oldest.add_metric([kind], max(0, now - due[kind]) / 1000 if kind in due else 0.0)
        folded_due = [due_at for kind, due_at in due.items() if kind not in shown_set]
        if folded or folded_due:
            age = max(0, now - min(folded_due)) / 1000 if folded_due else 0.0
            oldest.add_metric([OTHER_KIND], age)
        kinds_family.add_metric(["shown"], len(shown))
        kinds_family.add_metric(["folded"], len(kinds | set(due)) - len(shown))
        for holder in store.lease_holders():
            leases.add_metric([holder.owner_id], holder.leases)
        active = stale = 0
        for worker in store.list_workers():
            if worker.stopped_at is not None:
                continue
            if now - worker.last_seen_at <= self.stale_after_ms:
                active += 1
            else:
                stale += 1
        workers.add_metric(["active"], active)
        workers.add_metric(["stale"], stale)
        depths = store.queue_depths(cap=self.depth_cap)
        samples = queue_series(depths, self.max_queues).samples()
        for family in queues:
            for labels, value in samples[family.name]:
                family.add_metric(labels, value)
        schema = store.schema_info()
        build.add_metric([__version__, _store_type(store), str(schema.schema_version)], 1)
        cases.add_metric([], len(store.adjudication_cases(limit=MAX_CASES)))


def _store_type(store: Store) -> str:
    name = type(store).__name__.lower()
    if "postgres" in name:
        return "postgres"
    if "sqlite" in name:
        return "sqlite"
    return name


class _Forward(Collector):
    """Exposes another registry's metrics through this one (an observer's, say)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        return iter(self.source.collect())


def metrics_registry(
    store: Store | None,
    *,
    observer: PrometheusObserver | None = None,
    registry: CollectorRegistry | None = None,
    stale_after: timedelta = DEFAULT_STALE_AFTER,
) -> CollectorRegistry:
    """A registry exposing ``store`` (a :class:`StoreCollector`; ``None``: no store metrics), the
    ``observer``'s metrics and any other ``registry``, without changing either of them."""
    combined = CollectorRegistry()
    if store is not None:
        combined.register(StoreCollector(store, stale_after=stale_after))
    sources = [source for source in (observer.registry if observer else None, registry) if source]
    for source in dict.fromkeys(sources):  # the same registry twice would double every series
        combined.register(_Forward(source))
    return combined


class MetricsServer:
    """A running metrics endpoint (from :func:`serve_metrics`); ``close()`` stops it."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread, registry: Any) -> None:
        self._httpd = httpd
        self._thread = thread
        self.registry = registry
        address = httpd.server_address
        self.host: str = str(address[0])
        self.port: int = int(address[1])

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and wait for the server thread. Idempotent."""
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(
    store: Store | None,
    *,
    host: str = "127.0.0.1",
    port: int,
    observer: PrometheusObserver | None = None,
    registry: CollectorRegistry | None = None,
    stale_after: timedelta = DEFAULT_STALE_AFTER,
) -> MetricsServer:
    """Serve Prometheus metrics over HTTP on ``host:port`` (``port=0``: any free port) from a
    daemon thread, and return the running server (``.url``, ``.port``, ``.close()``).

    Exposes the ``observer``'s metrics and, unless ``store`` is ``None``, the store's
    (:class:`StoreCollector`; a fleet of workers on one store can leave it to one process, or
    to the web app's ``/metrics``). Binds to loopback by default: put a proxy in front, or
    choose ``host`` deliberately, to let a Prometheus on another machine scrape it.
    """
    if type(port) is not int or not 0 <= port <= 65535:
        raise InvalidArgument("port must be a TCP port (0–65535)", details={"field": "port"})
    if not isinstance(host, str) or not host.strip():
        raise InvalidArgument("host must be a host name or address", details={"field": "host"})
    if observer is not None and not isinstance(observer, PrometheusObserver):
        raise InvalidArgument("observer must be a jobledger.metrics.PrometheusObserver")
    combined = metrics_registry(
        store, observer=observer, registry=registry, stale_after=stale_after
    )
    httpd, thread = start_http_server(port, addr=host, registry=combined)
    return MetricsServer(httpd, thread, combined)


class MetricsService:
    """A worker's metrics endpoint for as long as the worker runs (a worker ``Service``).

    :meth:`App.worker <jobledger.App.worker>` adds one when ``metrics_port`` is set; the engine
    itself never imports this module. ``start()`` serves (:func:`serve_metrics`), ``close()``
    stops.
    """

    def __init__(
        self,
        store: Store,
        *,
        host: str = "127.0.0.1",
        port: int,
        observer: PrometheusObserver | None = None,
    ) -> None:
        self._store = store
        self._host = host
        self._port = port
        self._observer = observer
        self.server: MetricsServer | None = None

    def start(self) -> None:
        if self._observer is None:
            logger.warning(
                "no PrometheusObserver: serving only the store's metrics "
                "(App.worker(metrics_port=…) sets one up)"
            )
        self.server = serve_metrics(
            self._store, host=self._host, port=self._port, observer=self._observer
        )
        logger.info("serving metrics on %s", self.server.url)

    def close(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.close()
