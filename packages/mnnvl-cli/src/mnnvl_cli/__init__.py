"""kubectl mnnvl: see and mend what the mnnvl controllers do, through the API server."""

__version__ = "0.1.0"
