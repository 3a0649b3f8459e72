"""The :class:`~jobledger.store.base.Store` protocol, one part per area of operations."""
