"""mnnvl-topology: KAI Topologies and Grove bindings from configuration, and the clique census."""

__version__ = "0.1.0"
