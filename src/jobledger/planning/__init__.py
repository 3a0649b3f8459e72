"""Schedules applied through the store: the planner, ``explain`` and schedule declarations.

The rules themselves (cron, zones, triggers, misfire policy) are pure and live in
:mod:`jobledger.schedules`; this package reads and writes the store through the
:class:`~jobledger.store.Store` protocol only.
"""
