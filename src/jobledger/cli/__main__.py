"""``python -m jobledger.cli`` runs the ``jobledger`` command."""

from . import main

raise SystemExit(main())
