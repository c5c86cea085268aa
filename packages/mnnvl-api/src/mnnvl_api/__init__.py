"""Keys, models, naming and pure decisions shared by the mnnvl controllers."""

__version__ = "0.1.0"
