"""Event reasons mnnvl records on workloads. UpperCamelCase, defined once."""

from __future__ import annotations

from typing import Final

#: Warning: a ComputeDomain with the generated name exists and is not managed by this workload.
UNEXPECTED_OWNER_REASON: Final = "UnexpectedComputeDomainOwner"
COMPUTE_DOMAIN_CREATED_REASON: Final = "ComputeDomainCreated"
COMPUTE_DOMAIN_DELETED_REASON: Final = "ComputeDomainDeleted"
