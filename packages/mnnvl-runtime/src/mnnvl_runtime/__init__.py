"""The shared kit of the mnnvl controller processes."""

__version__ = "0.1.0"
