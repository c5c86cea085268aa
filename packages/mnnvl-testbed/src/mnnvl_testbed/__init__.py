"""A local Kubernetes control plane built from Go modules, with upstream LWS and NVIDIA's ComputeDomain controller."""

__version__ = "0.1.0"
