"""The package version, in a leaf module so that any module can read it without
importing the package root (which imports the rest of the core)."""

__version__ = "0.1.1"
