"""``python -m jobledger.web STORE`` — the same as ``jobledger web STORE``."""

from .cli import main

raise SystemExit(main())
