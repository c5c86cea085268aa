"""mnnvl-lws: per-replica ComputeDomains for LeaderWorkerSet."""

__version__ = "0.1.0"
