"""Event reasons mnnvl records on workloads. UpperCamelCase, defined once."""

from __future__ import annotations

from typing import Final

#: Warning: a ComputeDomain with the generated name exists and is not managed by this workload.
UNEXPECTED_OWNER_REASON: Final = "UnexpectedComputeDomainOwner"
COMPUTE_DOMAIN_CREATED_REASON: Final = "ComputeDomainCreated"
COMPUTE_DOMAIN_DELETED_REASON: Final = "ComputeDomainDeleted"
#: Warning: a write on a ComputeDomain or pod failed with an error a retry cannot fix (RBAC, invalid object).
COMPUTE_DOMAIN_WRITE_FAILED_REASON: Final = "ComputeDomainWriteFailed"
#: Warning: a pod of an opted-in workload runs without its channel claim (created while our webhook was absent).
POD_WITHOUT_CHANNEL_CLAIM_REASON: Final = "PodWithoutComputeDomainChannel"
#: Warning: a pod records a ComputeDomain name that is not the one its workload derives; it gets no domain.
INVALID_DOMAIN_NAME_REASON: Final = "InvalidComputeDomainName"
