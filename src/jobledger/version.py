"""The package version, at the bottom so that any floor may report it (workers, metrics, CLI)."""

__all__ = ["__version__"]

__version__ = "0.2.0"
