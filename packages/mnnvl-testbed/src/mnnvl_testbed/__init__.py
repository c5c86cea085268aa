"""A local Kubernetes control plane built from Go modules, with upstream LWS and an NVIDIA DRA driver simulator."""

__version__ = "0.1.0"
