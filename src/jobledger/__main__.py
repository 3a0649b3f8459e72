"""``python -m jobledger`` runs the ``jobledger`` command."""

from .cli import main

raise SystemExit(main())
