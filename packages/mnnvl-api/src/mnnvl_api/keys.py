"""Every label, annotation, finalizer, gate and claim key that mnnvl reads or writes.

Keys of the user contract (the AutoComputeDomain feature) come first; they are part of the public interface
and never change. Keys that only mnnvl itself uses follow. No other module spells these strings.
"""

from __future__ import annotations

from typing import Final

# --- The user contract -------------------------------------------------------------------------------

#: On a LeaderWorkerSet (or a DisaggregatedSet role): one ComputeDomain per replica. `enabled` | `disabled`.
LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/auto-compute-domain"
#: On a DisaggregatedSet (or one of its roles): one ComputeDomain per (slice, revision). `enabled` | `disabled`.
DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: Final = "disaggregatedset.x-k8s.io/auto-compute-domain"
#: On a pod template: comma-separated names of the containers that get the channel claim.
COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/compute-domain-containers"
#: On a managed ComputeDomain: UID of the LeaderWorkerSet or DisaggregatedSet that manages it.
OWNER_UID_LABEL: Final = "leaderworkerset.sigs.k8s.io/compute-domain-owner-uid"
#: On every managed ComputeDomain: released only once no Pod references the domain's claim template.
PROTECTION_FINALIZER: Final = "leaderworkerset.sigs.k8s.io/compute-domain-protection"
#: The pod-level resource claim (and container claim reference) that carries the IMEX channel.
CHANNEL_CLAIM_NAME: Final = "lws-compute-domain-channel"
#: Reserved pod-template annotation stamped on replica-scope templates.
COMPUTE_DOMAIN_PREFIX_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/compute-domain-prefix"
#: Reserved pod-template annotation naming the slice ComputeDomain; also records a pod's domain.
COMPUTE_DOMAIN_NAME_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/compute-domain-name"
#: What every pod-template key of mnnvl's starts with: the stamps, the reserved names, the containers annotation
#: and the scope label (webhook match conditions select on it).
TEMPLATE_KEY_PREFIX: Final = "leaderworkerset.sigs.k8s.io/compute-domain-"
#: Template annotations that only mnnvl may set.
RESERVED_TEMPLATE_ANNOTATIONS: Final = (COMPUTE_DOMAIN_PREFIX_ANNOTATION, COMPUTE_DOMAIN_NAME_ANNOTATION)
#: The feature gate in the `Configuration` file and the Helm values.
AUTO_COMPUTE_DOMAIN_FEATURE_GATE: Final = "AutoComputeDomain"

#: Allowed values of both auto-compute-domain annotations, in the order messages list them.
OPT_IN_ENABLED: Final = "enabled"
OPT_IN_DISABLED: Final = "disabled"
OPT_IN_VALUES: Final = (OPT_IN_ENABLED, OPT_IN_DISABLED)

# --- Upstream keys we read -----------------------------------------------------------------------------

LWS_GROUP: Final = "leaderworkerset.x-k8s.io"
LWS_VERSION: Final = "v1"
LWS_PLURAL: Final = "leaderworkersets"
LWS_API_VERSION: Final = "leaderworkerset.x-k8s.io/v1"
DS_GROUP: Final = "disaggregatedset.x-k8s.io"
DS_VERSION: Final = "v1"
DS_PLURAL: Final = "disaggregatedsets"
DS_API_VERSION: Final = "disaggregatedset.x-k8s.io/v1"
DS_KIND: Final = "DisaggregatedSet"

GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"
LWS_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_LEADER_NAME_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/leader-name"
#: On upstream's ControllerRevision of each template revision of a LeaderWorkerSet, and on the pods created from
#: that revision: the revision's hash.
LWS_TEMPLATE_REVISION_HASH_LABEL: Final = "leaderworkerset.sigs.k8s.io/template-revision-hash"
#: On an LWS (or a DisaggregatedSet role): a node label key; each group is placed within one value of it.
LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"
DS_NAME_LABEL: Final = "disaggregatedset.x-k8s.io/name"
DS_ROLE_LABEL: Final = "disaggregatedset.x-k8s.io/role"
DS_SLICE_LABEL: Final = "disaggregatedset.x-k8s.io/slice"
DS_REVISION_LABEL: Final = "disaggregatedset.x-k8s.io/revision"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"

# --- KAI Scheduler and Grove (topology-aware scheduling) -------------------------------------------------

KAI_TOPOLOGY_GROUP: Final = "kai.scheduler"
KAI_TOPOLOGY_VERSION: Final = "v1alpha1"
KAI_TOPOLOGY_API_VERSION: Final = "kai.scheduler/v1alpha1"
KAI_TOPOLOGY_PLURAL: Final = "topologies"
KAI_TOPOLOGY_KIND: Final = "Topology"
KAI_TOPOLOGY_CRD: Final = "topologies.kai.scheduler"
#: On a workload's top owner: the KAI Topology its gangs are placed by.
KAI_TOPOLOGY_ANNOTATION: Final = "kai.scheduler/topology"
#: On a workload's top owner: the level (node label, or alias on KAI v0.17+) all its pods must share.
KAI_REQUIRED_PLACEMENT_ANNOTATION: Final = "kai.scheduler/topology-required-placement"
KAI_SCHEDULER_NAME: Final = "kai-scheduler"
GROVE_GROUP: Final = "grove.io"
GROVE_VERSION: Final = "v1alpha1"
GROVE_API_VERSION: Final = "grove.io/v1alpha1"
GROVE_BINDING_PLURAL: Final = "clustertopologybindings"
GROVE_BINDING_KIND: Final = "ClusterTopologyBinding"
GROVE_PODCLIQUESET_PLURAL: Final = "podcliquesets"
GROVE_PODCLIQUESET_KIND: Final = "PodCliqueSet"
#: Grove's gang: the pods scheduled together, with the topology constraint Grove hands KAI (node label keys).
GROVE_SCHEDULER_GROUP: Final = "scheduler.grove.io"
GROVE_SCHEDULER_API_VERSION: Final = "scheduler.grove.io/v1alpha1"
GROVE_PODGANG_PLURAL: Final = "podgangs"
#: On every pod of a Grove workload: the name of its PodGang.
GROVE_PODGANG_LABEL: Final = "grove.io/podgang"
#: Dynamo's deployment, which makes PodCliqueSets (and is then the top owner KAI reads).
DYNAMO_API_VERSION: Final = "nvidia.com/v1alpha1"
DYNAMO_DEPLOYMENT_KIND: Final = "DynamoGraphDeployment"
DYNAMO_DEPLOYMENT_PLURAL: Final = "dynamographdeployments"

# --- mnnvl's own keys ----------------------------------------------------------------------------------

#: Scheduling gate held on pods until their ComputeDomain and its claim template are ready.
SCHEDULING_GATE: Final = "leaderworkerset.sigs.k8s.io/compute-domain"
#: On a managed ComputeDomain about to be deleted: pods are no longer admitted onto it (value: the controller and a
#: nonce, `mnnvl-lws/<hex>`, new for every mark, so the fence of a mark lifted and set again starts again).
#: Set with a resourceVersion precondition before the final in-use check, removed again if a user appears.
CONDEMNED_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/compute-domain-condemned"
#: On a DisaggregatedSet: when mnnvl-ds last asked upstream to reconcile it again (an RFC 3339 time), after a cause
#: of refusing its child LeaderWorkerSets went away; upstream would otherwise wait out its retry back-off.
RECONCILE_REQUESTED_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/compute-domain-reconcile-requested"
#: Stamped into enrolled pod templates (and so on pods); pod webhooks select on it. Values: SCOPE_*.
SCOPE_LABEL: Final = "leaderworkerset.sigs.k8s.io/compute-domain-scope"
SCOPE_REPLICA: Final = "replica"
SCOPE_SLICE: Final = "slice"
#: On managed ComputeDomains: the workload's name and the position the domain serves.
WORKLOAD_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/compute-domain-workload"
GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/compute-domain-group"
SLICE_LABEL: Final = "leaderworkerset.sigs.k8s.io/compute-domain-slice"
REVISION_LABEL: Final = "leaderworkerset.sigs.k8s.io/compute-domain-revision"

#: On the cluster-scoped Topologies and bindings mnnvl-topology creates: the installation that made it
#: (`<namespace>/<name>`, the Helm release's), written with the object; no other installation touches it.
INSTALLATION_ANNOTATION: Final = "mnnvl.dev/installation"

# --- Controller identities -----------------------------------------------------------------------------
# One name per controller: console script, Deployment, Lease, field manager, event source, managed-by value.

LWS_CONTROLLER: Final = "mnnvl-lws"
DS_CONTROLLER: Final = "mnnvl-ds"
GUARDIAN_CONTROLLER: Final = "mnnvl-guardian"
TOPOLOGY_CONTROLLER: Final = "mnnvl-topology"
#: The command-line tool (`kubectl mnnvl`): its field manager, for the writes of `gc --apply`.
CLI: Final = "kubectl-mnnvl"
#: Controllers whose ComputeDomains the guardian protects (their `app.kubernetes.io/managed-by` values).
DOMAIN_MANAGERS: Final = (LWS_CONTROLLER, DS_CONTROLLER)

# --- NVIDIA DRA driver ---------------------------------------------------------------------------------

COMPUTE_DOMAIN_GROUP: Final = "resource.nvidia.com"
COMPUTE_DOMAIN_VERSION: Final = "v1beta1"
COMPUTE_DOMAIN_PLURAL: Final = "computedomains"
COMPUTE_DOMAIN_API_VERSION: Final = "resource.nvidia.com/v1beta1"
COMPUTE_DOMAIN_KIND: Final = "ComputeDomain"
CHANNEL_DEVICE_CLASS: Final = "compute-domain-default-channel.nvidia.com"
COMPUTE_DOMAIN_DRIVER: Final = "compute-domain.nvidia.com"
