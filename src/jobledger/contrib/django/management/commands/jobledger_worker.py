"""``python manage.py jobledger_worker``: run a jobledger worker for the project's app.

It takes exactly the worker options of ``jobledger worker`` (one flag per
:class:`jobledger.WorkerOptions` field, built by the same code) plus ``--until-idle``.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobledger.cli.errors import EXIT_STUCK
from jobledger.cli.worker import add_option_flags, options_from_args
from jobledger.contrib.django import get_app
from jobledger.engine.drain import Drain


class Command(BaseCommand):
    help = "Run a jobledger worker with the handlers of JOBLEDGER['APP'] until SIGTERM/SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        add_option_flags(parser)
        parser.add_argument(
            "--until-idle", action="store_true", help="stop when nothing is left to run"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        app = get_app()
        worker_options = options_from_args(argparse.Namespace(**options))
        if options["until_idle"]:
            if worker_options.planner:
                app.plan()
            report = Drain(app.worker(worker_options.with_changes(planner=False))).run()
            self.stdout.write(f"jobledger worker idle: {report.outcome}")
            return
        summary = app.run_worker(worker_options)
        self.stdout.write(f"jobledger worker stopped: {summary}")
        if summary.gave_up_stuck:
            # Non-zero, so that the supervisor starts a fresh process (WorkerOptions.stuck_grace).
            raise SystemExit(EXIT_STUCK)
