"""``python manage.py jobledger_worker``: run a jobledger worker for the project's app."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobledger.contrib.django import get_app
from jobledger.engine.drain import Drain


class Command(BaseCommand):
    help = "Run a jobledger worker with the handlers of JOBLEDGER['APP'] until SIGTERM/SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=1, help="attempts at once")
        parser.add_argument(
            "--queue", action="append", dest="queues", help="a queue to work (repeatable)"
        )
        parser.add_argument(
            "--poll-interval", type=float, default=None, help="seconds between idle polls"
        )
        parser.add_argument(
            "--until-idle", action="store_true", help="stop when nothing is left to run"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        app = get_app()
        settings: dict[str, Any] = {"concurrency": options["concurrency"]}
        if options["queues"]:
            settings["queues"] = frozenset(options["queues"])
        if options["poll_interval"] is not None:
            settings["poll_interval"] = timedelta(seconds=options["poll_interval"])
        worker = app.worker(**settings)
        if options["until_idle"]:
            report = Drain(worker).run()
            self.stdout.write(f"jobledger worker idle: {report.outcome}")
            return
        summary = worker.run(install_signal_handlers=True)
        self.stdout.write(f"jobledger worker stopped: {summary}")
