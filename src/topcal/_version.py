"""The version of topcal (one place; pyproject.toml holds the same string)."""

__version__ = "0.1.0"
