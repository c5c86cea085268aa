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

# --- mnnvl-topology: on the cluster-scoped Topology or ClusterTopologyBinding, or on the workload ------------

TOPOLOGY_CREATED_REASON: Final = "TopologyCreated"
#: KAI <= v0.16 makes a Topology's levels immutable, and v0.17+ its nodeLabel sequence: changing them recreates it.
TOPOLOGY_RECREATED_REASON: Final = "TopologyRecreated"
TOPOLOGY_ALIASES_UPDATED_REASON: Final = "TopologyAliasesUpdated"
#: Warning: the served Topology schema has no aliases (KAI <= v0.16), so the configured ones are left out.
TOPOLOGY_ALIASES_IGNORED_REASON: Final = "TopologyAliasesIgnored"
TOPOLOGY_DELETED_REASON: Final = "TopologyDeleted"
#: An earlier version's Topology (our field manager, no installation recorded) now records this installation.
TOPOLOGY_ADOPTED_REASON: Final = "TopologyAdopted"
#: Warning: a Topology or ClusterTopologyBinding with a configured name exists and is not this installation's
#: (Grove's, a user's, a copied manifest's, another installation's).
UNEXPECTED_TOPOLOGY_OWNER_REASON: Final = "UnexpectedTopologyOwner"
BINDING_CREATED_REASON: Final = "ClusterTopologyBindingCreated"
BINDING_UPDATED_REASON: Final = "ClusterTopologyBindingUpdated"
BINDING_DELETED_REASON: Final = "ClusterTopologyBindingDeleted"
BINDING_ADOPTED_REASON: Final = "ClusterTopologyBindingAdopted"
#: Warning: the API server refused a write on a Topology or binding (Grove's webhook, RBAC, validation).
TOPOLOGY_WRITE_REFUSED_REASON: Final = "TopologyWriteRefused"
#: Grove's ClusterTopologyBinding API is not served: the topology works with KAI Scheduler only.
KAI_ONLY_REASON: Final = "GroveBindingSkipped"
#: Warning, on the census ConfigMap: an API (Grove's bindings, ComputeDomains) is served since start-up and is
#: watched only after a restart (kopf looks for the resources it watches once, at start-up).
WATCH_NEEDS_RESTART_REASON: Final = "WatchNeedsRestart"
#: Warning: a Pending group needs more nodes in one clique than any clique has free.
CLIQUE_TOO_SMALL_REASON: Final = "NoCliqueFitsGroup"
