"""`kubectl mnnvl doctor`: is the cluster ready for mnnvl, and is the installed release healthy?

Functional core, imperative shell: `read` gathers the facts (one discovery GET per API, one list per kind narrowed
by selectors, a few single objects) into `Facts`, turning every refused or unserved read into an `Unreadable`
reason instead of an error; `checks` decides from those plain values alone. Nothing is written: the webhook probes
are dry runs and the RBAC questions are SubjectAccessReviews, which the API server answers without storing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import datetime
import enum
import json
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from cryptography import x509

from mnnvl_api import keys
from mnnvl_api.models import configuration as configuration_file
from mnnvl_runtime import kube, preflight, webhooks

from . import reading, release, render
from .snapshot import Object


class Outcome(enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


class Check(render.Report):
    name: str
    outcome: Outcome
    finding: str
    fix: str = ""


def ok(name: str, finding: str) -> Check:
    return Check(name=name, outcome=Outcome.OK, finding=finding)


def warn(name: str, finding: str, fix: str) -> Check:
    return Check(name=name, outcome=Outcome.WARN, finding=finding, fix=fix)


def fail(name: str, finding: str, fix: str) -> Check:
    return Check(name=name, outcome=Outcome.FAIL, finding=finding, fix=fix)


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A read the API server refused or could not answer, as the one line that says why."""

    reason: str


def unreadable(name: str, what: str, found: Unreadable) -> Check:
    return warn(name, f"cannot check {what}: {found.reason}", "run doctor as a user who may read it")


# --- what the checks expect of the cluster --------------------------------------------------------------------------

CRD_API: Final = "apiextensions.k8s.io/v1"
DOMAIN_CRD: Final = f"{keys.COMPUTE_DOMAIN_PLURAL}.{keys.COMPUTE_DOMAIN_GROUP}"
#: The NVIDIA DRA driver's chart name before and after its move to kubernetes-sigs: its workloads'
#: `app.kubernetes.io/name`.
DRIVER_SELECTOR: Final = "app.kubernetes.io/name in (nvidia-dra-driver-gpu,dra-driver-nvidia-gpu)"
#: The driver's containers that read the feature gates: the ComputeDomain controller (Deployment) and the
#: ComputeDomain kubelet plugin (DaemonSet).
DRIVER_CONTAINERS: Final = {"Deployment": "compute-domain", "DaemonSet": "compute-domains"}
DNS_NAMES_GATE: Final = "IMEXDaemonsWithDNSNames"
DRIVER_MANAGED: Final = "driverManaged"
LWS_MANAGER: Final = "lws-controller-manager"
CLIQUE_NODES_SHOWN: Final = 5
#: How far this machine's clock may differ from the controllers' before a renewed Lease looks stale.
CLOCK_SKEW_SECONDS: Final = 10
CERT_WARNING_DAYS: Final = 30
TLS_SECRET_SUFFIX: Final = "-webhook-tls"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
PROBE_POD: Final = "kubectl-mnnvl-doctor-probe"
PROBE_IMAGE: Final = "registry.k8s.io/pause:3.10"
DENIED_BY: Final = re.compile(r'admission webhook "([^"]+)" denied')
FAILED_CALLING: Final = re.compile(r'failed calling webhook "([^"]+)"')
SERVICE_ACCOUNT_GROUPS: Final = ("system:serviceaccounts", "system:authenticated")
GATED_CONTROLLERS: Final = (keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER)
SCOPES: Final = {keys.LWS_CONTROLLER: keys.SCOPE_REPLICA, keys.DS_CONTROLLER: keys.SCOPE_SLICE}


@dataclasses.dataclass(frozen=True)
class ExpectedWebhook:
    """How the chart registers one webhook (`charts/mnnvl/files/webhooks`): its match conditions (by name; their
    CEL changes with the release) and objectSelector. Either narrows the requests that fail while it is down."""

    handler: str
    match_conditions: tuple[str, ...] = ()
    object_selector: Mapping[str, Any] | None = None


def _managed_by(controller: str) -> Mapping[str, Any]:
    return {"matchLabels": {keys.MANAGED_BY_LABEL: controller}}


def _scope_pods(scope: str) -> Mapping[str, Any]:
    return {"matchLabels": {keys.SCOPE_LABEL: scope}}


_CONCERNS = ("concerns-auto-compute-domain",)
EXPECTED_WEBHOOKS: Final[Mapping[str, tuple[ExpectedWebhook, ...]]] = {
    keys.LWS_CONTROLLER: (
        ExpectedWebhook("mutate-leaderworkerset", _CONCERNS),
        ExpectedWebhook(webhooks.POD_WEBHOOK, object_selector=_scope_pods(keys.SCOPE_REPLICA)),
        ExpectedWebhook("validate-leaderworkerset", _CONCERNS),
        ExpectedWebhook(webhooks.DOMAIN_IDENTITY_WEBHOOK, ("writes-as-mnnvl-lws",), _managed_by(keys.LWS_CONTROLLER)),
    ),
    keys.DS_CONTROLLER: (
        ExpectedWebhook("mutate-disaggregatedset", _CONCERNS),
        ExpectedWebhook(webhooks.POD_WEBHOOK, object_selector=_scope_pods(keys.SCOPE_SLICE)),
        ExpectedWebhook("validate-disaggregatedset", _CONCERNS),
        ExpectedWebhook("validate-leaderworkerset", ("slice-scope-leaderworkerset",)),
        ExpectedWebhook(webhooks.DOMAIN_IDENTITY_WEBHOOK, ("writes-as-mnnvl-ds",), _managed_by(keys.DS_CONTROLLER)),
    ),
    keys.GUARDIAN_CONTROLLER: (
        ExpectedWebhook(
            "validate-computedomain-delete",
            object_selector={
                "matchExpressions": [
                    {"key": keys.MANAGED_BY_LABEL, "operator": "In", "values": list(keys.DOMAIN_MANAGERS)}
                ]
            },
        ),
    ),
}


@dataclasses.dataclass(frozen=True)
class Permission:
    """Verbs on a resource a controller's ServiceAccount needs: cluster-wide, or in its own namespace (`namespaced`),
    on one object (`name`) or all."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    name: str | None = None
    namespaced: bool = False

    def described(self, verb: str) -> str:
        where = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{verb} {where}" + (f" {self.name}" if self.name else "")


_WATCH = ("get", "list", "watch")
_EVENTS = Permission("", "events", ("create",))
#: What each controller's calls need cluster-wide (the chart's ClusterRoles; tests/unit/mnnvl_cli/test_doctor.py
#: checks the two agree), without the ComputeDomain rules, which only the gate needs (DOMAIN_PERMISSIONS).
CLUSTER_PERMISSIONS: Final[Mapping[str, tuple[Permission, ...]]] = {
    keys.LWS_CONTROLLER: (
        Permission("", "pods", (*_WATCH, "patch")),
        Permission("apps", "statefulsets", ("get",)),
        Permission("apps", "controllerrevisions", ("list", "watch")),
        Permission(keys.LWS_GROUP, keys.LWS_PLURAL, _WATCH),
        Permission("resource.k8s.io", "resourceclaimtemplates", ("list", "watch")),
        _EVENTS,
    ),
    keys.DS_CONTROLLER: (
        Permission("", "pods", (*_WATCH, "patch")),
        Permission(keys.DS_GROUP, keys.DS_PLURAL, (*_WATCH, "patch")),
        Permission(keys.LWS_GROUP, keys.LWS_PLURAL, _WATCH),
        Permission("resource.k8s.io", "resourceclaimtemplates", ("list", "watch")),
        _EVENTS,
    ),
    keys.GUARDIAN_CONTROLLER: (
        Permission("", "pods", _WATCH),
        Permission("", "nodes", ("get",)),
        _EVENTS,
    ),
    keys.TOPOLOGY_CONTROLLER: (
        Permission(keys.KAI_TOPOLOGY_GROUP, keys.KAI_TOPOLOGY_PLURAL, (*_WATCH, "create", "patch", "delete")),
        Permission(keys.GROVE_GROUP, keys.GROVE_BINDING_PLURAL, (*_WATCH, "create", "patch", "delete")),
        Permission("apiextensions.k8s.io", "customresourcedefinitions", ("get",), name=keys.KAI_TOPOLOGY_CRD),
        Permission("", "nodes", ("list", "watch")),
        Permission("", "pods", ("list", "watch")),
        Permission(keys.COMPUTE_DOMAIN_GROUP, keys.COMPUTE_DOMAIN_PLURAL, ("list", "watch")),
        Permission(keys.LWS_GROUP, keys.LWS_PLURAL, ("get",)),
        Permission(keys.DS_GROUP, keys.DS_PLURAL, ("get",)),
        Permission("apps", "statefulsets", ("get",)),
        Permission("apps", "replicasets", ("get",)),
        Permission("apps", "deployments", ("get",)),
        Permission("batch", "jobs", ("get",)),
        Permission(keys.GROVE_SCHEDULER_GROUP, keys.GROVE_PODGANG_PLURAL, ("get",)),
        Permission(keys.GROVE_GROUP, keys.GROVE_PODCLIQUESET_PLURAL, ("get",)),
        Permission("nvidia.com", keys.DYNAMO_DEPLOYMENT_PLURAL, ("get",)),
        _EVENTS,
    ),
}
_DOMAIN_WRITES = ("get", "list", "watch", "create", "delete", "patch")
DOMAIN_PERMISSIONS: Final[Mapping[str, tuple[str, ...]]] = {
    keys.LWS_CONTROLLER: _DOMAIN_WRITES,
    keys.DS_CONTROLLER: _DOMAIN_WRITES,
    keys.GUARDIAN_CONTROLLER: ("get", "list", "watch", "patch"),  # patch: it releases the protection finalizer
}
CLIQUE_CENSUS: Final = "mnnvl-clique-census"


def permissions(controller: release.InstalledController) -> list[Permission]:
    """What `controller`'s ServiceAccount must be allowed, as its configuration runs it."""
    needed = list(CLUSTER_PERMISSIONS.get(controller.controller, ()))
    if controller.gate_enabled and controller.controller in DOMAIN_PERMISSIONS:
        verbs = DOMAIN_PERMISSIONS[controller.controller]
        needed.append(Permission(keys.COMPUTE_DOMAIN_GROUP, keys.COMPUTE_DOMAIN_PLURAL, verbs))
    # Its Lease: created once (create cannot be narrowed to a name), then renewed.
    needed.append(Permission("coordination.k8s.io", "leases", ("create",), namespaced=True))
    needed.append(
        Permission("coordination.k8s.io", "leases", ("get", "update", "patch"), controller.controller, namespaced=True)
    )
    if controller.controller == keys.TOPOLOGY_CONTROLLER:  # the clique census, server-side applied
        needed.append(Permission("", "configmaps", ("create",), namespaced=True))
        needed.append(Permission("", "configmaps", ("patch",), CLIQUE_CENSUS, namespaced=True))
    return needed


# --- the facts ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    """The API server's answer to a dry-run request: its status, its message, and the refusal when an admission
    webhook refused it (`kube.admission_denial`)."""

    status: int | None
    message: str = ""
    denial: str | None = None


Api = tuple[str, str]  # (apiVersion, plural)
Found = TypeVar("Found")
DOMAINS: Final[Api] = (keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL)
LWS: Final[Api] = (keys.LWS_API_VERSION, keys.LWS_PLURAL)
DS: Final[Api] = (keys.DS_API_VERSION, keys.DS_PLURAL)
#: Dynamic Resource Allocation at v1 (Kubernetes 1.34+): the claim templates the driver makes for every domain.
CLAIM_TEMPLATES: Final[Api] = (reading.CLAIM_TEMPLATE_API, "resourceclaimtemplates")
KAI_TOPOLOGIES: Final[Api] = (keys.KAI_TOPOLOGY_API_VERSION, keys.KAI_TOPOLOGY_PLURAL)
GROVE_BINDINGS: Final[Api] = (keys.GROVE_API_VERSION, keys.GROVE_BINDING_PLURAL)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Facts:
    now: datetime.datetime
    probe_namespace: str
    served: Mapping[Api, bool | Unreadable]
    domain_crd: Object | Unreadable | None
    #: The driver's Deployments and DaemonSets, each with its `kind` set.
    driver: Sequence[Object] | Unreadable
    lws_managers: Sequence[Object] | Unreadable
    controllers: Sequence[release.InstalledController] | Unreadable
    #: namespace → its Leases.
    leases: Mapping[str, Sequence[Object] | Unreadable]
    webhook_configurations: Sequence[Object] | Unreadable
    #: scope controller → the answer to its dry-run pod (absent: not probed).
    probes: Mapping[str, Answer]
    #: `<namespace>/<name>` of each readable webhook serving Secret → its tls.crt (PEM).
    serving_certs: Mapping[str, str]
    #: controller → (permission described, allowed) for each verb it needs.
    access: Mapping[str, Sequence[tuple[str, bool]] | Unreadable]
    topologies: Sequence[Object] | Unreadable | None
    bindings: Sequence[Object] | Unreadable | None
    nodes: Sequence[Object] | Unreadable


# --- the decisions --------------------------------------------------------------------------------------------------


def checks(facts: Facts) -> list[Check]:
    """Every check, in the order a user fixes them: prerequisites, the release, its webhooks, then the rest."""
    controllers = facts.controllers
    installed = [] if isinstance(controllers, Unreadable) else list(controllers)
    by_name = {c.controller for c in installed}
    found = [
        served_check(
            "DRA API",
            facts.served[CLAIM_TEMPLATES],
            "mnnvl and the NVIDIA driver need Dynamic Resource Allocation at resource.k8s.io/v1: Kubernetes 1.34+",
            api=CLAIM_TEMPLATES,
        ),
        served_check("ComputeDomain API", facts.served[DOMAINS], DRIVER_FIX),
        *([] if facts.served[DOMAINS] is False else [domain_crd_check(facts.domain_crd)]),
        driver_check(facts.driver),
        *lws_checks(facts.served[LWS], facts.lws_managers),
        ds_check(facts.served[DS], ds_installed=keys.DS_CONTROLLER in by_name),
        release_check(controllers),
    ]
    for controller in installed:
        if controller.problem:
            found.append(
                fail(
                    f"{controller.controller} configuration",
                    controller.problem,
                    f"fix ConfigMap {controller.config_map} (Helm: "
                    f"{_component(controller)}.configuration) and helm upgrade the release",
                )
            )
        found.append(lease_check(controller, facts.leases.get(controller.namespace, ()), facts.now))
    configurations = facts.webhook_configurations
    if isinstance(configurations, Unreadable):
        if webhook_controllers(installed):
            found.append(unreadable("webhooks", "the webhook configurations", configurations))
    else:
        for controller in webhook_controllers(installed):
            found += webhook_checks(controller, configurations)
            answer = facts.probes.get(controller.controller)
            registered = _webhooks_by_name(configurations).get(release.pod_webhook(controller.controller))
            if answer is not None and registered is not None:
                found.append(probe_check(controller.controller, registered, answer, facts.probe_namespace))
        found += ca_checks(configurations, facts.now)
    found += [serving_cert_check(name, pem, facts.now) for name, pem in sorted(facts.serving_certs.items())]
    if gates := gates_check(installed):
        found.append(gates)
    found += [rbac_check(c, facts.access[c.controller]) for c in installed if c.controller in facts.access]
    if keys.TOPOLOGY_CONTROLLER in by_name:
        topology = next(c for c in installed if c.controller == keys.TOPOLOGY_CONTROLLER)
        found += topology_checks(topology, facts.served, facts.topologies, facts.bindings)
    found.append(clique_check(facts.nodes))
    return found


DRIVER_FIX: Final = (
    "install the NVIDIA DRA driver for GPUs (k8s-dra-driver-gpu) with ComputeDomains enabled "
    "(resources.computeDomains.enabled=true)"
)


def served_check(name: str, served: bool | Unreadable, fix: str, *, api: Api = DOMAINS) -> Check:
    what = f"{api[1]} ({api[0]})"
    if isinstance(served, Unreadable):
        return unreadable(name, f"whether {what} is served", served)
    if not served:
        return fail(name, f"the API server does not serve {what}", fix)
    return ok(name, f"{what} is served")


def domain_crd_check(crd: Object | Unreadable | None) -> Check:
    """Whether the installed CRD requires `spec.numNodes` (drivers up to v25.12) or not (v0.4+): either works, since
    mnnvl always sends `numNodes: 0`; the finding tells which driver generation installed the CRD."""
    name = "ComputeDomain CRD"
    if isinstance(crd, Unreadable):
        return warn(name, f"cannot read CRDs: {crd.reason}", "run doctor as a user who may get CRDs (optional)")
    if crd is None:
        return warn(name, f"no CRD {DOMAIN_CRD}, yet the API is served", "check which component serves ComputeDomains")
    version = next(
        (v for v in crd.get("spec", {}).get("versions") or () if v.get("name") == keys.COMPUTE_DOMAIN_VERSION), None
    )
    if version is None:
        return fail(
            name, f"{DOMAIN_CRD} has no version {keys.COMPUTE_DOMAIN_VERSION}", "upgrade the NVIDIA DRA driver's CRDs"
        )
    spec = (((version.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties") or {}).get("spec") or {}
    if "numNodes" in (spec.get("required") or ()):
        return ok(name, "spec.numNodes is required (driver v25.x CRD); mnnvl sends numNodes 0, which it accepts")
    return ok(name, "spec.numNodes is optional (driver v0.4+ CRD); mnnvl sends numNodes 0")


def driver_check(workloads: Sequence[Object] | Unreadable) -> Check:
    """The driver's IMEX setup, from its Deployment's and DaemonSet's containers: IMEXDaemonsWithDNSNames must not
    be off (mnnvl's `numNodes: 0` domains rely on it) and the IMEX mode must be driverManaged (one IMEX domain per
    ComputeDomain)."""
    name = "DRA driver IMEX mode"
    if isinstance(workloads, Unreadable):
        return unreadable(name, "the NVIDIA DRA driver's feature gates", workloads)
    found = [
        (f"{w['kind']} {_namespaced_name(w)}", container)
        for w in workloads
        for container in (w.get("spec") or {}).get("template", {}).get("spec", {}).get("containers") or ()
        if container.get("name") == DRIVER_CONTAINERS.get(str(w.get("kind")))
    ]
    if not found:
        return warn(
            name,
            "could not find the NVIDIA DRA driver's controller Deployment (labelled app.kubernetes.io/name "
            "nvidia-dra-driver-gpu or dra-driver-nvidia-gpu)",
            f"check by hand that its FEATURE_GATES leave {DNS_NAMES_GATE} on and IMEX_MODE is {DRIVER_MANAGED}",
        )
    problems: list[tuple[str, str]] = []
    for where, container in found:
        settings = _container_settings(container)
        gates = _gates(settings.get("FEATURE_GATES", ""))
        if gates.get(DNS_NAMES_GATE) is False:
            problems.append(
                (
                    f"{where} runs with {DNS_NAMES_GATE}=false: mnnvl's domains (numNodes 0) need DNS-named daemons",
                    f"set featureGates.{DNS_NAMES_GATE}=true in the driver's Helm values",
                )
            )
        if (mode := settings.get("IMEX_MODE")) and mode != DRIVER_MANAGED:
            problems.append(
                (
                    f"{where} runs in IMEX mode {mode}: its domains share the host's IMEX domain, unisolated",
                    f"set resources.computeDomains.imex.mode={DRIVER_MANAGED} in the driver's Helm values",
                )
            )
        if _predates_dns_names(str(container.get("image") or "")):
            problems.append(
                (
                    f"{where} runs {container.get('image')}, older than {DNS_NAMES_GATE} (v25.8)",
                    "upgrade the NVIDIA DRA driver to v25.8 or later",
                )
            )
    if problems:
        return fail(name, "; ".join(p for p, _ in problems), "; ".join(dict.fromkeys(f for _, f in problems)))
    images = sorted({str(c.get("image") or "?") for _, c in found})
    return ok(name, f"{', '.join(w for w, _ in found)} ({', '.join(images)}): {DNS_NAMES_GATE} on, {DRIVER_MANAGED}")


def _container_settings(container: Mapping[str, Any]) -> dict[str, str]:
    """The driver's FEATURE_GATES and IMEX_MODE, from the container's environment or its flags (which win)."""
    found = {str(e["name"]): str(e["value"]) for e in container.get("env") or () if "value" in e}
    words = [str(w) for w in (*(container.get("command") or ()), *(container.get("args") or ()))]
    for flag, setting in (("--feature-gates", "FEATURE_GATES"), ("--imex-mode", "IMEX_MODE")):
        for index, word in enumerate(words):
            if word.startswith(f"{flag}="):
                found[setting] = word.partition("=")[2]
            elif word == flag and index + 1 < len(words):
                found[setting] = words[index + 1]
    return found


def _gates(value: str) -> dict[str, bool]:
    """`A=true,B=false,` (the chart's rendering of featureGates) as a map."""
    pairs = (item.partition("=") for item in value.split(",") if "=" in item)
    return {key.strip(): flag.strip().lower() == "true" for key, _, flag in pairs}


def _predates_dns_names(image: str) -> bool:
    """Whether the image tag names a driver release before IMEXDaemonsWithDNSNames: v25.3 (v0.1 in the later
    numbering, where v0.2 is v25.8); an unknown tag is given the benefit of the doubt."""
    repository, _, tag = image.split("@", maxsplit=1)[0].rpartition(":")
    match = re.match(r"v?(\d+)\.(\d+)", tag) if repository and "/" not in tag else None
    if match is None:
        return False
    major, minor = int(match.group(1)), int(match.group(2))
    return (major == 25 and minor < 8) or (major == 0 and minor < 2)


def lws_checks(served: bool | Unreadable, managers: Sequence[Object] | Unreadable) -> list[Check]:
    name = "LeaderWorkerSet API"
    found = served_check(name, served, "install LeaderWorkerSet (https://lws.sigs.k8s.io)", api=LWS)
    if found.outcome is not Outcome.OK:
        return [found]
    if isinstance(managers, Unreadable):
        return [found, unreadable("LWS version", f"the Deployment {LWS_MANAGER}", managers)]
    images = sorted({_image(m) for m in managers})
    version = (
        f"; {LWS_MANAGER} runs {', '.join(images)}"
        if images
        else f"; its version is unknown (no Deployment {LWS_MANAGER})"
    )
    return [ok(name, found.finding + version)]


def _image(deployment: Object) -> str:
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}]
    chosen = next((c for c in containers if c.get("name") == "manager"), containers[0])
    return str(chosen.get("image") or "?")


def ds_check(served: bool | Unreadable, *, ds_installed: bool) -> Check:
    name = "DisaggregatedSet API"
    if isinstance(served, Unreadable) or served:
        return served_check(name, served, "", api=DS)
    if ds_installed:
        return fail(
            name,
            f"mnnvl-ds is installed, but {DS[1]} ({DS[0]}) is not served",
            "install LeaderWorkerSet v0.10+ with DisaggregatedSet, or disable mnnvl-ds (ds.enabled=false)",
        )
    return ok(name, f"{DS[1]} ({DS[0]}) is not served; only mnnvl-ds needs it, and it is not installed")


def release_check(controllers: Sequence[release.InstalledController] | Unreadable) -> Check:
    name = "mnnvl release"
    if isinstance(controllers, Unreadable):
        return unreadable(name, "which mnnvl controllers are installed", controllers)
    if not controllers:
        return fail(
            name,
            f"mnnvl is not installed (no ConfigMap labelled {release.PART_OF_SELECTOR})",
            "helm install the mnnvl chart (docs/install.md)",
        )
    listed = ", ".join(f"{c.controller} ({c.namespace})" for c in controllers)
    return ok(name, f"installed: {listed}")


def lease_check(
    controller: release.InstalledController, leases: Sequence[Object] | Unreadable, now: datetime.datetime
) -> Check:
    """Whether a replica of the controller holds its Lease and renewed it within the Lease's duration."""
    name = f"{controller.controller} Lease"
    where = f"{controller.namespace}/{controller.controller}"
    if controller.configuration is not None and not controller.configuration.leader_election.leader_elect:
        return ok(name, "leader election is off (leaderElection.leaderElect: false): no Lease to check")
    if isinstance(leases, Unreadable):
        return unreadable(name, f"the Lease {where}", leases)
    lease = next((item for item in leases if item["metadata"]["name"] == controller.controller), None)
    pods = f"kubectl -n {controller.namespace} get pods -l app.kubernetes.io/component={_component(controller)}"
    if lease is None:
        return fail(name, f"no Lease {where}: no replica has ever led", f"check its pods and logs ({pods})")
    spec = lease.get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    renewed = render.timestamp(spec.get("renewTime"))
    duration = float(spec.get("leaseDurationSeconds") or _lease_duration(controller))
    age = None if renewed is None else int((now - renewed).total_seconds())
    if not holder:
        return fail(
            name, f"Lease {where} is not held (released {_ago(age)}): no replica leads", f"check its pods ({pods})"
        )
    if age is None or age > duration + CLOCK_SKEW_SECONDS:
        return fail(
            name,
            f"Lease {where} last renewed {_ago(age)} by {holder} (lasts {duration:g}s, {CLOCK_SKEW_SECONDS}s allowed "
            "for clock skew): the controller is not running or cannot reach the API server",
            f"check its pods and logs ({pods})",
        )
    return ok(name, f"held by {holder}, renewed {_ago(age)} (within {duration:g}s)")


def _lease_duration(controller: release.InstalledController) -> float:
    settings = controller.configuration or configuration_file.Configuration()
    return float(settings.leader_election.lease_duration_seconds)


def _ago(age: int | None) -> str:
    return "never" if age is None else f"{max(age, 0)}s ago"


def _component(controller: release.InstalledController) -> str:
    return controller.controller.removeprefix("mnnvl-")


def webhook_controllers(controllers: Sequence[release.InstalledController]) -> list[release.InstalledController]:
    """The controllers whose webhooks the chart registers: the scope controllers, and the guardian in Deny mode."""
    return [
        c
        for c in controllers
        if c.controller in SCOPES
        or (
            c.controller == keys.GUARDIAN_CONTROLLER
            and c.configuration is not None
            and c.configuration.compute_domain.deletion_protection is configuration_file.DeletionProtection.DENY
        )
    ]


def _webhooks_by_name(configurations: Sequence[Object]) -> dict[str, Object]:
    return {str(w["name"]): w for c in configurations for w in c.get("webhooks") or ()}


def webhook_checks(controller: release.InstalledController, configurations: Sequence[Object]) -> list[Check]:
    """Each webhook the chart registers for `controller`: present, failing closed, narrowed as the chart narrows
    it (wider only makes an outage block more; narrower or different may skip requests it must see)."""
    name = f"{controller.controller} webhooks"
    registered = _webhooks_by_name(configurations)
    helm = _component(controller)
    found: list[Check] = []
    expected = EXPECTED_WEBHOOKS[controller.controller]
    for webhook in expected:
        full = webhooks.webhook_name(controller.controller, webhook.handler)
        actual = registered.get(full)
        if actual is None:
            found.append(fail(name, f"webhook {full} is not registered", "helm upgrade the release"))
            continue
        if actual.get("failurePolicy") == "Ignore":
            consequence = (
                "pods admitted while it is down run without the channel claim"
                if webhook.handler == webhooks.POD_WEBHOOK
                else "requests admitted while it is down skip its checks"
            )
            found.append(
                warn(
                    name,
                    f"{full} has failurePolicy Ignore: {consequence}",
                    f"set {helm}.webhook.failurePolicy=Fail and helm upgrade the release",
                )
            )
        conditions = tuple(sorted(str(c.get("name")) for c in actual.get("matchConditions") or ()))
        if conditions != tuple(sorted(webhook.match_conditions)):
            found.append(
                warn(
                    name,
                    f"{full} has matchConditions {list(conditions)}, the chart sets {list(webhook.match_conditions)}",
                    "helm upgrade the release (do not edit its webhook configurations by hand)",
                )
            )
        # The API server stores an absent objectSelector as {}.
        selector = actual.get("objectSelector") or None
        if selector != webhook.object_selector:
            found.append(
                warn(
                    name,
                    f"{full} has objectSelector {json.dumps(selector)}, the chart sets "
                    f"{json.dumps(webhook.object_selector)}",
                    "helm upgrade the release (do not edit its webhook configurations by hand)",
                )
            )
    return found or [ok(name, f"{len(expected)} registered as the chart registers them, failurePolicy Fail")]


def probe_check(controller: str, webhook: Object, answer: Answer, namespace: str) -> Check:
    """Whether the controller's pod webhook answered a dry-run pod in `namespace`: any answer from it (admitted,
    or its refusal) proves it is reachable; the API server failing to call it is the outage users hit."""
    name = f"{controller} webhook answers"
    full = str(webhook["name"])
    if _excluded(webhook, namespace):
        return warn(
            name,
            f"cannot probe: {full} is not called for namespace {namespace}",
            "pass --probe-namespace with a namespace of workloads",
        )
    if answer.denial is not None:
        denier = DENIED_BY.search(answer.denial)
        if denier is not None and denier.group(1) != full:
            return warn(
                name,
                f"cannot tell: {denier.group(1)} refused the dry-run pod before {full} was asked",
                "pass --probe-namespace with a namespace that webhook leaves alone",
            )
        reason = answer.denial.partition("denied the request: ")[2] or answer.denial
        return ok(name, f"{full} answered a dry-run pod in {namespace}: it refused it ({reason})")
    failed = FAILED_CALLING.search(answer.message)
    if failed is not None:
        if failed.group(1) != full:
            return warn(
                name,
                f"cannot tell: the API server failed calling {failed.group(1)} first: {answer.message}",
                "fix that webhook, or pass --probe-namespace with a namespace it leaves alone",
            )
        return fail(
            name,
            answer.message,
            f"check the {controller} pods, its webhook Service and its serving certificate",
        )
    if answer.status == 403:
        return warn(
            name,
            f"cannot probe: you may not create pods in {namespace} ({answer.message})",
            "pass --probe-namespace with a namespace where you may create pods",
        )
    if answer.status is not None and answer.status < 400:
        if webhook.get("failurePolicy") == "Ignore":  # the API server admits the pod whether or not it answered
            return warn(name, f"cannot tell: {full} ignores its failures, so the dry-run pod was admitted", "see above")
        return ok(name, f"{full} answered a dry-run pod in {namespace}: it admitted it")
    if answer.status == 404:
        return warn(
            name,
            f"cannot probe: {answer.message}",
            "pass --probe-namespace with an existing namespace",
        )
    return warn(
        name,
        f"cannot tell: the dry-run pod in {namespace} got {answer.status or 'no answer'}: {answer.message}",
        "run doctor again; if it persists, check the API server",
    )


def _excluded(webhook: Object, namespace: str) -> bool:
    """Whether the webhook's namespaceSelector leaves out `namespace` by name (the chart excludes kube-system and
    the release namespace so); other labels of the namespace are not known here."""
    for expression in (webhook.get("namespaceSelector") or {}).get("matchExpressions") or ():
        if expression.get("key") != NAMESPACE_NAME_LABEL:
            continue
        values = expression.get("values") or ()
        if (expression.get("operator") == "NotIn") == (namespace in values):
            return True
    return False


def ca_checks(configurations: Sequence[Object], now: datetime.datetime) -> list[Check]:
    """The CA each mnnvl webhook trusts (its caBundle), once per distinct bundle."""
    bundles: dict[str, list[str]] = {}
    for webhook in _webhooks_by_name(configurations).values():
        bundle = str((webhook.get("clientConfig") or {}).get("caBundle") or "")
        bundles.setdefault(bundle, []).append(str(webhook["name"]))
    found = []
    for bundle, names in sorted(bundles.items()):
        users = f"{len(names)} webhook{'s' if len(names) > 1 else ''}" + (f" ({names[0]})" if len(names) == 1 else "")
        if not bundle:
            found.append(
                warn(
                    "webhook CA",
                    f"{users} carry no caBundle: the API server cannot trust a self-signed serving certificate",
                    "with certs.mode=certManager check cert-manager's CA injector; else set certs.caBundle",
                )
            )
            continue
        try:
            certificates = x509.load_pem_x509_certificates(base64.b64decode(bundle, validate=True))
        except (ValueError, binascii.Error):
            found.append(
                warn("webhook CA", f"the caBundle of {users} is no PEM certificate", "helm upgrade the release")
            )
            continue
        # A bundle may hold the old and the new CA while one replaces the other: it works while either does.
        latest = max(certificates, key=lambda c: c.not_valid_after_utc)
        found.append(
            expiry_check("webhook CA", f"CA {latest.subject.rfc4514_string()} of {users}", latest, now, CA_RENEWAL)
        )
    return found


CA_RENEWAL: Final = (
    "renew the webhook CA: with certs.mode=selfSigned delete the release's -webhook-tls Secret and helm upgrade; "
    "with cert-manager check its Certificate"
)


def serving_cert_check(secret: str, pem: str, now: datetime.datetime) -> Check:
    name = "webhook serving cert"
    try:
        certificate = x509.load_pem_x509_certificate(pem.encode())
    except ValueError:
        return warn(name, f"Secret {secret}'s tls.crt is no PEM certificate", "helm upgrade the release")
    return expiry_check(name, f"Secret {secret}'s certificate", certificate, now, CA_RENEWAL)


def expiry_check(name: str, what: str, certificate: x509.Certificate, now: datetime.datetime, fix: str) -> Check:
    expires = certificate.not_valid_after_utc
    days = (expires - now).days
    date = expires.date().isoformat()
    if expires <= now:
        return fail(name, f"{what} expired on {date}: the API server cannot call the webhooks", fix)
    if days < CERT_WARNING_DAYS:
        return warn(name, f"{what} expires on {date}, in {days} days", fix)
    return ok(name, f"{what} valid until {date} ({days} days)")


def gates_check(controllers: Sequence[release.InstalledController]) -> Check | None:
    """Whether the controllers that use the AutoComputeDomain gate agree on it (None: fewer than one to compare)."""
    gate = keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE
    states = {c.controller: c.gate_enabled for c in controllers if c.controller in GATED_CONTROLLERS}
    known = {controller: on for controller, on in states.items() if on is not None}
    if not known:
        return None
    on = sorted(c for c, enabled in known.items() if enabled)
    off = sorted(c for c, enabled in known.items() if not enabled)
    if on and off:
        return warn(
            "feature gates",
            f"{gate} is on in {', '.join(on)} and off in {', '.join(off)}",
            f"set featureGates.{gate} once for the release (not per controller) unless this is meant",
        )
    return ok("feature gates", f"{gate} is {'on' if on else 'off'} in {', '.join(on or off)}")


def rbac_check(controller: release.InstalledController, access: Sequence[tuple[str, bool]] | Unreadable) -> Check:
    name = f"{controller.controller} RBAC"
    account = f"{controller.namespace}/{controller.service_account}"
    if isinstance(access, Unreadable):
        return unreadable(name, f"what ServiceAccount {account} may do", access)
    denied = [what for what, allowed in access if not allowed]
    if denied:
        return fail(
            name,
            f"ServiceAccount {account} may not {', '.join(denied)}",
            "helm upgrade the release (its ClusterRole and Role grant these)",
        )
    return ok(name, f"ServiceAccount {account} may do all {len(access)} things it needs")


def topology_checks(
    controller: release.InstalledController,
    served: Mapping[Api, bool | Unreadable],
    topologies: Sequence[Object] | Unreadable | None,
    bindings: Sequence[Object] | Unreadable | None,
) -> list[Check]:
    """What mnnvl-topology provisions: KAI Topologies (KAI must serve them) and, when Grove is installed, a
    ClusterTopologyBinding for each."""
    api = served_check(
        "KAI Topology API",
        served[KAI_TOPOLOGIES],
        "install KAI Scheduler, or disable mnnvl-topology (topology.enabled=false)",
        api=KAI_TOPOLOGIES,
    )
    found = [api]
    wanted = [] if controller.configuration is None else controller.configuration.topologies
    logs = "mnnvl-topology creates it; check its Lease and logs"
    if api.outcome is Outcome.OK:
        found.append(_objects_check("KAI topologies", "Topology", [t.name for t in wanted], topologies, logs))
    grove = served[GROVE_BINDINGS]
    if isinstance(grove, Unreadable):
        found.append(unreadable("Grove bindings", "whether Grove is installed", grove))
    elif not grove:
        found.append(ok("Grove bindings", "Grove serves no ClusterTopologyBinding: none is made (Grove is optional)"))
    else:
        names = [t.binding_name for t in wanted if t.grove_binding.enabled]
        found.append(_objects_check("Grove bindings", keys.GROVE_BINDING_KIND, names, bindings, logs))
    return found


def _objects_check(
    name: str, kind: str, wanted: Sequence[str], listed: Sequence[Object] | Unreadable | None, fix: str
) -> Check:
    if isinstance(listed, Unreadable):
        return unreadable(name, f"the {kind}s", listed)
    present = {str(o["metadata"]["name"]) for o in listed or ()}
    missing = [n for n in wanted if n not in present]
    if missing:
        return warn(name, f"{kind} {', '.join(missing)} does not exist", fix)
    return ok(name, f"{kind} {', '.join(wanted)} exists" if wanted else f"the configuration asks for no {kind}")


def clique_check(nodes: Sequence[Object] | Unreadable) -> Check:
    """GPU nodes (allocatable nvidia.com/gpu) without the clique label: the topology that keeps a domain's pods in
    one NVLink clique cannot place pods on them."""
    name = "GPU node cliques"
    if isinstance(nodes, Unreadable):
        return unreadable(name, "the nodes' clique labels", nodes)
    gpu = [n for n in nodes if _gpus(n) > 0]
    unlabelled = sorted(
        str(n["metadata"]["name"]) for n in gpu if not (n["metadata"].get("labels") or {}).get(keys.GPU_CLIQUE_LABEL)
    )
    if not gpu:
        return ok(name, f"no node has allocatable {keys.GPU_RESOURCE}: nothing to check")
    if unlabelled:
        shown = ", ".join(unlabelled[:CLIQUE_NODES_SHOWN]) + (", …" if len(unlabelled) > CLIQUE_NODES_SHOWN else "")
        return warn(
            name,
            f"{len(unlabelled)} of {len(gpu)} GPU nodes have no {keys.GPU_CLIQUE_LABEL} label: {shown}",
            "if they are NVLink (MNNVL) nodes, run GPU Feature Discovery (GPU operator), which labels them",
        )
    return ok(name, f"all {len(gpu)} GPU nodes carry {keys.GPU_CLIQUE_LABEL}")


def _gpus(node: Object) -> int:
    value = str((node.get("status") or {}).get("allocatable", {}).get(keys.GPU_RESOURCE) or "0")
    try:
        return int(value)
    except ValueError:  # a quantity with a suffix: not a count, but not zero either
        return 1


def _namespaced_name(obj: Object) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


# --- the reads ------------------------------------------------------------------------------------------------------


def run_checks(client: kube.Kube, *, probe_namespace: str) -> list[Check]:
    return checks(read(client, probe_namespace=probe_namespace))


def read(client: kube.Kube, *, probe_namespace: str) -> Facts:
    """Every fact the checks need. An API server that cannot be reached, or does not take the credentials, is the
    one error raised (`reading.UserError`): nothing could be checked."""
    try:
        client.request("GET", "/version")
    except kube.ApiError as error:
        raise reading.explained(error, "reaching the API server") from error
    served = {api: _served(client, api) for api in (CLAIM_TEMPLATES, DOMAINS, LWS, DS, KAI_TOPOLOGIES, GROVE_BINDINGS)}
    controllers = _attempt(lambda: release.installed_controllers(client))
    installed = [] if isinstance(controllers, Unreadable) else controllers
    configurations = _attempt(lambda: release.webhook_configurations(client))
    topology = any(c.controller == keys.TOPOLOGY_CONTROLLER for c in installed)
    return Facts(
        now=datetime.datetime.now(datetime.UTC),
        probe_namespace=probe_namespace,
        served=served,
        domain_crd=_get(client, CRD_API, "customresourcedefinitions", DOMAIN_CRD),
        driver=_attempt(lambda: _driver_workloads(client)),
        lws_managers=_field_selected(client, "apps/v1", "deployments", f"metadata.name={LWS_MANAGER}"),
        controllers=controllers,
        leases={
            namespace: _listed(client, "coordination.k8s.io/v1", "leases", namespace=namespace)
            for namespace in sorted({c.namespace for c in installed})
        },
        webhook_configurations=configurations,
        probes=_probes(client, installed, configurations, probe_namespace),
        serving_certs=_serving_certs(client, installed),
        access=_access(client, installed),
        topologies=_listed(client, *KAI_TOPOLOGIES) if topology and served[KAI_TOPOLOGIES] is True else None,
        bindings=_listed(client, *GROVE_BINDINGS) if topology and served[GROVE_BINDINGS] is True else None,
        nodes=_listed(client, "v1", "nodes"),
    )


def _attempt(read_: Callable[[], Found]) -> Found | Unreadable:
    try:
        return read_()
    except reading.UserError as error:
        return Unreadable(str(error))


def _listed(
    client: kube.Kube, api_version: str, plural: str, *, namespace: str | None = None
) -> list[Object] | Unreadable:
    """All objects of a kind; an unserved kind is an empty list (each caller checks whether it is served)."""
    return _attempt(lambda: reading.list_all(client, api_version, plural, namespace=namespace) or [])


def _served(client: kube.Kube, api: Api) -> bool | Unreadable:
    try:
        return preflight.is_served(client, *api)
    except kube.ApiError as error:
        return Unreadable(str(reading.explained(error, f"discovering {api[0]}")))


def _get(client: kube.Kube, api_version: str, plural: str, name: str) -> Object | Unreadable | None:
    try:
        return client.get(api_version, plural, name)
    except kube.ApiError as error:
        return Unreadable(str(reading.explained(error, f"reading {plural} {name}")))


def _field_selected(client: kube.Kube, api_version: str, plural: str, selector: str) -> list[Object] | Unreadable:
    """One list, every namespace, by a field selector (a handful of objects: no paging)."""
    try:
        listed = client.request("GET", kube.path_of(api_version, plural), query={"fieldSelector": selector})
    except kube.ApiError as error:
        return Unreadable(str(reading.explained(error, f"listing {plural} ({selector})")))
    return list(listed.get("items") or ())


def _driver_workloads(client: kube.Kube) -> list[Object]:
    found: list[Object] = []
    for plural, kind in (("deployments", "Deployment"), ("daemonsets", "DaemonSet")):
        for item in reading.list_all(client, "apps/v1", plural, label_selector=DRIVER_SELECTOR) or ():
            found.append({**item, "kind": kind})
    return found


def _probes(
    client: kube.Kube,
    controllers: Sequence[release.InstalledController],
    configurations: Sequence[Object] | Unreadable,
    namespace: str,
) -> dict[str, Answer]:
    """A dry-run pod for each scope controller whose pod webhook is registered. It carries the scope label, which
    the webhook's objectSelector takes, and no LeaderWorkerSet label: upstream LWS's pod webhook, called before
    mnnvl's (configurations are called in name order), would refuse a pod of no LeaderWorkerSet first."""
    if isinstance(configurations, Unreadable):
        return {}
    registered = release.webhook_names(configurations)
    answers = {}
    for controller in controllers:
        scope = SCOPES.get(controller.controller)
        if scope is None or release.pod_webhook(controller.controller) not in registered:
            continue
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": PROBE_POD,
                "namespace": namespace,
                "labels": {keys.SCOPE_LABEL: scope},
            },
            "spec": {"containers": [{"name": "probe", "image": PROBE_IMAGE}]},
        }
        try:
            client.request(
                "POST",
                kube.path_of("v1", "pods", namespace=namespace),
                query={"dryRun": "All", "fieldManager": reading.FIELD_MANAGER},
                body=pod,
            )
        except kube.ApiError as error:
            answers[controller.controller] = Answer(
                status=error.status, message=reading.api_message(error), denial=kube.admission_denial(error)
            )
        else:
            answers[controller.controller] = Answer(status=201)
    return answers


def _serving_certs(client: kube.Kube, controllers: Sequence[release.InstalledController]) -> dict[str, str]:
    """The chart's serving certificate (`<fullname>-webhook-tls`) of each release with a webhook server; a Secret
    the user may not read, or one named otherwise (certs.secretName), is left out: the probes test serving anyway."""
    found = {}
    names = {
        (c.namespace, c.component_name.removesuffix(f"-{_component(c)}") + TLS_SECRET_SUFFIX)
        for c in controllers
        if c.controller in EXPECTED_WEBHOOKS
    }
    for namespace, name in sorted(names):
        try:
            secret = client.get("v1", "secrets", name, namespace=namespace)
        except kube.ApiError:
            continue
        data = (secret or {}).get("data") or {}
        if "tls.crt" in data:
            found[f"{namespace}/{name}"] = base64.b64decode(data["tls.crt"]).decode(errors="replace")
    return found


def _access(
    client: kube.Kube, controllers: Sequence[release.InstalledController]
) -> dict[str, list[tuple[str, bool]] | Unreadable]:
    """SubjectAccessReviews for what each controller needs, asked at once (dozens of small independent POSTs)."""
    asked = [(c, p, verb) for c in controllers for p in permissions(c) for verb in p.verbs]

    async def ask_all() -> list[Object | kube.ApiError]:
        return await asyncio.gather(*(_review(client, c, p, verb) for c, p, verb in asked))

    answers = asyncio.run(ask_all()) if asked else []
    found: dict[str, list[tuple[str, bool]] | Unreadable] = {}
    for (controller, permission, verb), answer in zip(asked, answers, strict=True):
        if isinstance(found.get(controller.controller), Unreadable):
            continue
        if isinstance(answer, kube.ApiError):
            found[controller.controller] = Unreadable(
                str(reading.explained(answer, "creating subjectaccessreviews (asking what a ServiceAccount may do)"))
            )
            continue
        allowed = bool((answer.get("status") or {}).get("allowed"))
        listed = found.setdefault(controller.controller, [])
        assert isinstance(listed, list)
        listed.append((permission.described(verb), allowed))
    return found


async def _review(
    client: kube.Kube, controller: release.InstalledController, permission: Permission, verb: str
) -> Object | kube.ApiError:
    attributes = {"verb": verb, "group": permission.group, "resource": permission.resource}
    if permission.namespaced:
        attributes["namespace"] = controller.namespace
    if permission.name:
        attributes["name"] = permission.name
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{controller.namespace}:{controller.service_account}",
            "groups": [*SERVICE_ACCOUNT_GROUPS, f"system:serviceaccounts:{controller.namespace}"],
            "resourceAttributes": attributes,
        },
    }
    try:
        return await client.arequest("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    except kube.ApiError as error:
        return error


# --- output ---------------------------------------------------------------------------------------------------------

LABELS: Final = {Outcome.OK: ("OK", "green"), Outcome.WARN: ("WARN", "yellow"), Outcome.FAIL: ("FAIL", "red")}


def as_table(checks: Sequence[Check], style: render.Style) -> str:
    """One line per check (outcome, name, finding), its fix on an indented line below; wrapped, not cut, to fit."""
    name_width = max((len(c.name) for c in checks), default=0)
    indent = " " * (4 + 2 + name_width + 2)
    lines: list[str] = []
    for check in checks:
        label, colour = LABELS[check.outcome]
        head = f"{style.paint(label.ljust(4), colour)}  {check.name.ljust(name_width)}  "
        lines += _wrapped(check.finding, first=head, rest=indent)
        if check.fix:
            lines += _wrapped(f"fix: {check.fix}", first=indent, rest=indent + "     ")
    counts = {outcome: sum(c.outcome is outcome for c in checks) for outcome in Outcome}
    lines.append(
        f"{counts[Outcome.OK]} ok, {counts[Outcome.WARN]} warning{'' if counts[Outcome.WARN] == 1 else 's'}, "
        f"{counts[Outcome.FAIL]} failure{'' if counts[Outcome.FAIL] == 1 else 's'}"
    )
    return "\n".join(lines)


def _wrapped(text: str, *, first: str, rest: str) -> list[str]:
    """`text` after `first`, continued after `rest` (at least as wide), each line within render.WIDTH."""
    pieces = textwrap.wrap(text, width=max(render.WIDTH - len(rest), 40), break_on_hyphens=False) or [""]
    return [first + pieces[0], *(rest + piece for piece in pieces[1:])]


def exit_code(checks: Sequence[Check]) -> int:
    """0 when every check is ok, 1 with warnings, 2 with a failure."""
    outcomes = {c.outcome for c in checks}
    return 2 if Outcome.FAIL in outcomes else 1 if Outcome.WARN in outcomes else 0
