"""FastAPI's name for :mod:`jobledger.contrib.asgi`: ``FastAPI(lifespan=lifespan(jobs))`` runs
an in-process worker from startup to a graceful shutdown (nothing FastAPI-specific: any ASGI
application with a lifespan takes it)."""

from __future__ import annotations

from .asgi import lifespan, running_worker

__all__ = ["lifespan", "running_worker"]
