"""The engine: running occurrences on top of the store.

One claimed attempt's life — checks, handler, settlement, report — is owned by
:class:`~jobledger.engine.attempt.Attempt`; :class:`~jobledger.engine.runtime.Runtime` holds what
attempts share (handlers, lease timing, the lease keeper, the watchdog, the event loop) and runs
one attempt at a time; :class:`~jobledger.engine.worker.Worker` runs many, fed by batched claims
(``batching``) and with its housekeeping (``housekeeping``). Nothing here is imported by the
store or the planner; the face (``jobledger.App``) wires it together.
"""
