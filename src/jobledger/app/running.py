"""Running work: runtimes and workers (the App's running methods)."""

from __future__ import annotations

from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..engine.heartbeat import HeartbeatDriver
from ..engine.observe import NO_OBSERVER, Observer
from ..engine.options import DEFAULT_LEASE, LeaseOptions, WorkerOptions
from ..engine.runtime import Runtime
from ..engine.watchdog import Watchdog
from ..engine.worker import Service, Worker, WorkerSummary
from ..errors import InvalidArgument

if TYPE_CHECKING:
    pass


from .base import AppBase

__all__ = ["RunningMethods"]


class RunningMethods(AppBase):
    """Running work: runtimes and workers."""

    # -- running -----------------------------------------------------------------------------

    def runtime(
        self,
        *,
        owner_id: str | None = None,
        lease: timedelta | None = None,
        renew_interval: timedelta | None = None,
        heartbeat: HeartbeatDriver | None = None,
        watchdog: Watchdog | None = None,
        observer: Observer | None = None,
    ) -> Runtime:
        """A :class:`Runtime` with this app's handlers (``authorize`` must have been given);
        its attempts are traced when the app traces (``docs/observability.md``)."""
        leases = LeaseOptions(DEFAULT_LEASE if lease is None else lease, renew_interval)
        observer = self._tracing.observer(NO_OBSERVER if observer is None else observer)
        runtime = Runtime(
            self.store,
            authorize=self.authorize,
            owner_id=owner_id,
            leases=leases,
            clock=self.clock,
            heartbeat=heartbeat,
            retry_policy=self.retry_policy,
            watchdog=watchdog,
            observer=observer,
        )
        for kind, (function, retry, timeout) in self._handlers.items():
            traced = self._tracing.handler(observer, function)
            runtime.register_handler(kind, traced, retry=retry, timeout=timeout)
        with self._lock:
            self._runtimes.append(runtime)
        return runtime

    def _discard_runtime(self, runtime: Runtime) -> None:
        """Close ``runtime`` and stop tracking it (for short-lived runtimes such as
        :func:`jobledger.testing.run_until_idle`'s, so a long-lived app does not pile them up)."""
        runtime.close()
        with self._lock:
            if runtime in self._runtimes:
                self._runtimes.remove(runtime)

    def worker(
        self,
        options: WorkerOptions | None = None,
        *,
        heartbeat: HeartbeatDriver | None = None,
        observer: Observer | None = None,
        **settings: Any,
    ) -> Worker:
        """A :class:`Worker` over a new :meth:`runtime` (not started).

        Settings are a :class:`~jobledger.WorkerOptions` or its fields as keywords
        (``app.worker(concurrency=4, prefetch=32)``). With ``metrics_port`` the worker serves
        Prometheus metrics (a :class:`~jobledger.metrics.PrometheusObserver` unless ``observer``
        is given) for as long as it runs.
        """
        base = options or WorkerOptions()
        resolved = base.with_changes(**settings) if settings else base
        services: list[Service] = []
        if resolved.metrics_port is not None:
            metrics = _metrics_module()
            if observer is None:
                observer = metrics.PrometheusObserver()
            services.append(
                metrics.MetricsService(
                    self.store,
                    host=resolved.metrics_host,
                    port=resolved.metrics_port,
                    observer=observer if isinstance(observer, metrics.PrometheusObserver) else None,
                )
            )
        runtime = self.runtime(
            owner_id=resolved.owner_id,
            lease=resolved.lease,
            renew_interval=resolved.renew_interval,
            heartbeat=heartbeat,
            observer=observer,
        )
        return Worker(runtime, resolved.with_changes(owner_id=runtime.owner_id), services=services)

    def run_worker(
        self,
        options: WorkerOptions | None = None,
        *,
        install_signal_handlers: bool = True,
        observer: Observer | None = None,
        **settings: Any,
    ) -> WorkerSummary:
        """Run a worker in this thread until SIGTERM/SIGINT (or ``worker.stop()``)."""
        worker = self.worker(options, observer=observer, **settings)
        return worker.run(install_signal_handlers=install_signal_handlers)


def _metrics_module() -> ModuleType:
    """:mod:`jobledger.metrics`, or a coded error when its extra is not installed (for
    ``metrics_port``)."""
    try:
        from .. import metrics
    except ImportError as exc:
        raise InvalidArgument(
            "metrics_port needs prometheus-client: pip install 'jobledger[metrics]'",
            details={"field": "metrics_port"},
        ) from exc
    return metrics
