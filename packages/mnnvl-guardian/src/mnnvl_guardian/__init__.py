"""mnnvl-guardian: the protection finalizer of managed ComputeDomains."""

__version__ = "0.1.0"
