"""mnnvl-ds: per-slice ComputeDomains for DisaggregatedSet."""

__version__ = "0.1.0"
