"""The package version, in a module that imports nothing (the package root re-exports it)."""

__version__ = "0.1.0"

__all__ = ["__version__"]
