"""The controllers' configuration file: `config.lws.x-k8s.io/v1` `Configuration`.

It carries the seed's feature gates (`AutoComputeDomain`, off by default) and the settings mnnvl's
controllers need. Unknown keys and unknown feature gates are errors, at every level: a misspelt key
(`featureGate:`) would otherwise leave its setting at the default without a word.
"""

from __future__ import annotations

import difflib
import enum
import re
import typing
from collections.abc import Sequence
from typing import Final, Literal, TypeGuard

import pydantic

from .. import keys
from .. import names as names_module
from .base import KubeModel

API_VERSION: Final = "config.lws.x-k8s.io/v1"
KIND: Final = "Configuration"
#: Every feature gate this release knows, in the order error messages list them.
KNOWN_FEATURE_GATES: Final = (keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE,)
BIND_ADDRESS_RULE: Final = "must be host:port or :port with a port from 1 to 65535, or empty to disable"
#: Kubernetes' default for the kube-apiserver's `--request-timeout`.
DEFAULT_API_SERVER_REQUEST_TIMEOUT_SECONDS: Final = 60.0
#: How much longer than the API server's request timeout the deletion fence must be at least: a pod's write sent
#: to etcd just before its request's deadline can still commit a moment after it (milliseconds on a healthy etcd).
FENCE_MARGIN_SECONDS: Final = 1.0


def minimum_fence_seconds(api_server_request_timeout_seconds: float) -> float:
    """The shortest safe deletion fence: no pod creation, every admission webhook included, outlives the API
    server's request timeout, so a pod admitted onto a domain just before its mark is persisted within it."""
    return api_server_request_timeout_seconds + FENCE_MARGIN_SECONDS


class DeletionProtection(enum.Enum):
    #: The seed's behaviour: the protection finalizer holds a deleted domain until no Pod references it.
    FINALIZER = "Finalizer"
    #: Also refuse the DELETE of an in-use managed domain at admission, so the driver never starts teardown.
    DENY = "Deny"


class _SettingsModel(KubeModel):
    """A section of the file: camelCase like every model, but unknown keys are rejected instead of kept."""

    model_config = pydantic.ConfigDict(extra="forbid")


class ComputeDomainSettings(_SettingsModel):
    deletion_protection: DeletionProtection = DeletionProtection.FINALIZER
    #: The kube-apiserver's `--request-timeout`: no request, a pod's creation with all its admission webhooks
    #: included, runs longer. It bounds the deletion fence from below.
    api_server_request_timeout_seconds: float = pydantic.Field(default=DEFAULT_API_SERVER_REQUEST_TIMEOUT_SECONDS, gt=0)
    #: How long a condemned ComputeDomain waits before its final in-use check and deletion; at least
    #: `minimum_fence_seconds(apiServerRequestTimeoutSeconds)`, which is also its default, so a pod admitted just
    #: before the domain was condemned is persisted, and seen, before the domain is deleted.
    deletion_fence_seconds: float = minimum_fence_seconds(DEFAULT_API_SERVER_REQUEST_TIMEOUT_SECONDS)

    @pydantic.model_validator(mode="after")
    def _fence_outlasts_admission(self) -> ComputeDomainSettings:
        minimum = minimum_fence_seconds(self.api_server_request_timeout_seconds)
        if "deletion_fence_seconds" not in self.model_fields_set:
            self.deletion_fence_seconds = minimum  # the default follows the declared request timeout
        elif self.deletion_fence_seconds < minimum:
            raise ValueError(
                f"deletionFenceSeconds {self.deletion_fence_seconds:g} is shorter than a pod admission may take; "
                f"set it to at least {minimum:g} (apiServerRequestTimeoutSeconds "
                f"{self.api_server_request_timeout_seconds:g} + {FENCE_MARGIN_SECONDS:g} s margin), or, if your "
                "kube-apiserver runs with a shorter --request-timeout, set apiServerRequestTimeoutSeconds to it"
            )
        return self


class WebhookSettings(_SettingsModel):
    host: str = "0.0.0.0"
    port: int = pydantic.Field(default=9443, ge=1, le=65535)
    cert_dir: str = "/tmp/k8s-webhook-server/serving-certs"
    #: How often the serving certificate files are re-read; a change (cert-manager rotation) restarts serving.
    cert_check_interval_seconds: float = pydantic.Field(default=60.0, gt=0)


class LeaderElectionSettings(_SettingsModel):
    leader_elect: bool = True
    lease_duration_seconds: int = pydantic.Field(default=15, ge=1)
    renew_deadline_seconds: int = pydantic.Field(default=10, ge=1)
    retry_period_seconds: int = pydantic.Field(default=2, ge=1)

    @pydantic.model_validator(mode="after")
    def _renew_before_expiry(self) -> LeaderElectionSettings:
        if not self.retry_period_seconds < self.renew_deadline_seconds < self.lease_duration_seconds:
            raise ValueError("need retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds")
        return self


class MetricsSettings(_SettingsModel):
    #: Serve metrics over HTTPS, only to bearer tokens the API server authenticates (TokenReview) and authorizes
    #: for `get` on the non-resource URL `/metrics` (SubjectAccessReview). Off: plain HTTP to whoever reaches it.
    secure: bool = False
    #: Where the secure endpoint's `tls.crt` and `tls.key` are. None: the webhook's certDir for a controller that
    #: serves webhooks, else a self-signed certificate made at start-up.
    cert_dir: str | None = None


class WatchingSettings(_SettingsModel):
    #: How often every watch store is reconciled against a fresh list, so objects deleted while a watch was
    #: re-listing leave no ghost entries.
    store_resync_seconds: float = pydantic.Field(default=120.0, gt=0)


class ReconciliationSettings(_SettingsModel):
    #: How many keys (workloads, domains) the Lease holder reconciles at once; one key is never in two passes
    #: at once, whatever this is.
    concurrency: int = pydantic.Field(default=16, ge=1, le=256)
    #: How often the Lease holder looks at every key again although no event named it (a missed event, a
    #: deletion fence that passed, gauges refreshed).
    resync_seconds: float = pydantic.Field(default=30.0, gt=0)


class ShutdownSettings(_SettingsModel):
    #: After SIGTERM, how long a webhook-serving replica reports not ready while it still answers admission
    #: requests, so the Service's endpoints drop it before it stops listening.
    drain_seconds: float = pydantic.Field(default=5.0, ge=0)
    #: How long the process may then take to stop its loops before it exits anyway (a stop that waits on an API
    #: server that does not answer must not outlast the pod's termination grace period).
    stop_timeout_seconds: float = pydantic.Field(default=15.0, gt=0)


#: KAI's pattern for `levels[].nodeLabel` and `levels[].alias` (a label key: optional DNS-subdomain prefix + `/`).
LABEL_KEY: Final = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
#: Grove's pattern for `levels[].domain`.
GROVE_DOMAIN: Final = re.compile(r"^[a-z][a-z0-9-]*$")
KAI_MAX_LEVELS: Final = 16
KAI_MAX_LABEL_LENGTH: Final = 316
GROVE_MAX_LENGTH: Final = 63


def default_domain(node_label: str) -> str:
    """The portable Grove domain of a node label, by NVCF's rule: its last path element without dots
    (`nvidia.com/gpu.clique` → `gpuclique`, `kubernetes.io/hostname` → `hostname`)."""
    return node_label.rpartition("/")[2].replace(".", "").lower()


class TopologyLevelSettings(_SettingsModel):
    node_label: str
    #: KAI v0.17+ only (dropped on older KAI, whose schema has no aliases).
    alias: str | None = None
    #: Grove's portable name for the level; NVCF's rule by default (`default_domain`).
    domain: str | None = None

    @property
    def grove_domain(self) -> str:
        return self.domain if self.domain is not None else default_domain(self.node_label)


class GroveBindingSettings(_SettingsModel):
    enabled: bool = True
    #: Default `<topology>-binding`, as NVCF names it (see docs/topology.md on the Grove releases this needs).
    name: str | None = None
    scheduler_name: str = keys.KAI_SCHEDULER_NAME


class TopologySettings(_SettingsModel):
    """One KAI `Topology` (levels widest to narrowest) and, when Grove is served, its `ClusterTopologyBinding`."""

    name: str
    levels: list[TopologyLevelSettings]
    grove_binding: GroveBindingSettings = pydantic.Field(default_factory=GroveBindingSettings)

    @property
    def binding_name(self) -> str:
        return self.grove_binding.name or f"{self.name}-binding"

    @pydantic.model_validator(mode="after")
    def _valid_for_kai_and_grove(self) -> TopologySettings:
        problems = topology_problems(self)
        if problems:
            raise ValueError(f"topology {self.name!r}: {'; '.join(problems)}")
        return self


def topology_problems(entry: TopologySettings) -> list[str]:
    """What KAI or Grove would refuse in `entry`, each with its fix (empty: nothing)."""
    problems: list[str] = []
    names = [("name", entry.name)] + (
        [("groveBinding.name", entry.binding_name)] if entry.grove_binding.enabled else []
    )
    # Checked as Kubernetes checks a pod's `spec.schedulerName`, even with the binding disabled: unlike the
    # binding's name it is never derived, so a bad one is always a typo.
    names.append(("groveBinding.schedulerName", entry.grove_binding.scheduler_name))
    for what, name in names:
        if not names_module.is_dns1123_subdomain(name):
            problems.append(f"{what} {name!r} is not a DNS subdomain name; use lowercase letters, digits, '-' and '.'")
    labels = [level.node_label for level in entry.levels]
    if not labels:
        problems.append("levels is empty; list at least one node label, widest first")
    if len(labels) > KAI_MAX_LEVELS:
        problems.append(f"levels has {len(labels)} entries; KAI allows at most {KAI_MAX_LEVELS}")
    for label in labels:
        if len(label) > KAI_MAX_LABEL_LENGTH or not LABEL_KEY.match(label):
            problems.append(f"nodeLabel {label!r} is not a label key; use an optional DNS prefix, '/', and a name")
    problems += [f"nodeLabel {label!r} is listed twice; list each label once" for label in _repeated(labels)]
    if keys.HOSTNAME_LABEL in labels[:-1]:
        problems.append(f"{keys.HOSTNAME_LABEL} must be the last level, as KAI requires; move it to the end")
    aliases = [level.alias for level in entry.levels if level.alias is not None]
    for alias in aliases:
        if len(alias) > KAI_MAX_LABEL_LENGTH or not LABEL_KEY.match(alias):
            problems.append(f"alias {alias!r} is not a label key; use letters, digits, '-', '_' and '.'")
        if alias in labels:
            problems.append(f"alias {alias!r} equals a nodeLabel; KAI refuses that, choose another alias")
    problems += [f"alias {alias!r} is used twice; give each level its own alias" for alias in _repeated(aliases)]
    if entry.grove_binding.enabled:
        domains = [level.grove_domain for level in entry.levels]
        for domain in domains:
            if len(domain) > GROVE_MAX_LENGTH or not GROVE_DOMAIN.match(domain):
                problems.append(
                    f"domain {domain!r} is not a Grove domain; set levels[].domain to match [a-z][a-z0-9-]*"
                )
        problems += [f"domain {domain!r} is used twice; set distinct levels[].domain" for domain in _repeated(domains)]
        problems += [
            f"nodeLabel {label!r} is longer than Grove's {GROVE_MAX_LENGTH} characters; set groveBinding.enabled: false"
            for label in labels
            if len(label) > GROVE_MAX_LENGTH
        ]
    return problems


def _repeated(values: Sequence[str]) -> list[str]:
    return sorted({value for value in values if values.count(value) > 1})


DEFAULT_TOPOLOGY_NAME: Final = "nvcf-mnnvl-topology"
DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_LABEL_MAX_LENGTH: Final = 63
#: The installation's name when the file names none: the process namespace's `mnnvl` (as the kustomize install).
DEFAULT_INSTALLATION_NAME: Final = "mnnvl"
INSTALLATION_RULE: Final = (
    "must be <namespace>/<name>, e.g. mnnvl-system/mnnvl (the Helm release's namespace and name): a namespace "
    "(a DNS label) and a name (a DNS subdomain)"
)


def installation_problem(installation: str) -> str | None:
    """Why `installation` is no installation identity (None: it is one)."""
    namespace, slash, name = installation.partition("/")
    fits = (
        bool(slash)
        and len(namespace) <= DNS_LABEL_MAX_LENGTH
        and DNS_LABEL.match(namespace) is not None
        and names_module.is_dns1123_subdomain(name)
    )
    return None if fits else f"{INSTALLATION_RULE}; got {installation!r}"


def default_topologies() -> list[TopologySettings]:
    """NVCF's pair: `nvcf-mnnvl-topology` (clique, then host) and its binding `nvcf-mnnvl-topology-binding`."""
    return [
        TopologySettings(
            name=DEFAULT_TOPOLOGY_NAME,
            levels=[
                TopologyLevelSettings(node_label=keys.GPU_CLIQUE_LABEL),
                TopologyLevelSettings(node_label=keys.HOSTNAME_LABEL),
            ],
        )
    ]


class Configuration(_SettingsModel):
    api_version: Literal["config.lws.x-k8s.io/v1"] = API_VERSION
    kind: Literal["Configuration"] = KIND
    feature_gates: dict[str, bool] = pydantic.Field(default_factory=dict)
    compute_domain: ComputeDomainSettings = pydantic.Field(default_factory=ComputeDomainSettings)
    webhook: WebhookSettings = pydantic.Field(default_factory=WebhookSettings)
    leader_election: LeaderElectionSettings = pydantic.Field(default_factory=LeaderElectionSettings)
    watching: WatchingSettings = pydantic.Field(default_factory=WatchingSettings)
    reconciliation: ReconciliationSettings = pydantic.Field(default_factory=ReconciliationSettings)
    shutdown: ShutdownSettings = pydantic.Field(default_factory=ShutdownSettings)
    #: What mnnvl-topology provisions; only mnnvl-topology reads it.
    topologies: list[TopologySettings] = pydantic.Field(default_factory=default_topologies)
    #: Which installation this is (`<namespace>/<name>`; the chart writes its release's), recorded on the objects
    #: mnnvl-topology creates so that two installations never touch each other's. None: `<process namespace>/mnnvl`.
    installation: str | None = None
    #: Where Prometheus metrics and the health probes (/healthz, /readyz) are served; "" turns either off.
    metrics_bind_address: str = ":8080"
    health_bind_address: str = ":8081"
    metrics: MetricsSettings = pydantic.Field(default_factory=MetricsSettings)

    @pydantic.field_validator("feature_gates")
    @classmethod
    def _known_gates_only(cls, gates: dict[str, bool]) -> dict[str, bool]:
        problems = [_unknown_gate(name) for name in gates if name not in KNOWN_FEATURE_GATES]
        if problems:
            raise ValueError("; ".join(problems))
        return gates

    @pydantic.field_validator("topologies")
    @classmethod
    def _one_entry_per_name(cls, topologies: list[TopologySettings]) -> list[TopologySettings]:
        problems = [
            f"topologies: {name!r} names two topologies; give each its own name"
            for name in _repeated([entry.name for entry in topologies])
        ] + [
            f"topologies: binding name {name!r} is used twice; set distinct groveBinding.name"
            for name in _repeated([entry.binding_name for entry in topologies if entry.grove_binding.enabled])
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return topologies

    @pydantic.field_validator("installation")
    @classmethod
    def _installation_shape(cls, installation: str | None) -> str | None:
        problem = None if installation is None else installation_problem(installation)
        if problem is not None:
            raise ValueError(problem)
        return installation

    def installation_of(self, namespace: str) -> str:
        """This installation's identity: the file's, else `<namespace>/mnnvl` (`namespace`: the process's)."""
        return self.installation or f"{namespace}/{DEFAULT_INSTALLATION_NAME}"

    @pydantic.field_validator("metrics_bind_address", "health_bind_address")
    @classmethod
    def _bind_address_shape(cls, address: str) -> str:
        parse_bind_address(address)
        return address

    @property
    def auto_compute_domain(self) -> bool:
        """The AutoComputeDomain feature gate; off unless the file turns it on."""
        return self.feature_gates.get(keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE, False)


def _unknown_gate(name: str) -> str:
    close = difflib.get_close_matches(name, KNOWN_FEATURE_GATES, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown feature gate {name}{hint}; known gates: {', '.join(KNOWN_FEATURE_GATES)}"


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """`host:port` or `:port` as (host, port), the host empty for every interface; None for "" (turned off).

    Raises ValueError with the rule when the address has another shape."""
    if address == "":
        return None
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{BIND_ADDRESS_RULE}; got {address!r}")
    return host, int(port)


def unknown_field_problem(location: Sequence[str | int]) -> str:
    """The message for a key of the file that no section knows: its path, and its likely spelling or the keys
    its section accepts. `location` is pydantic's error location of the key, e.g. ("webhook", "prot")."""
    *parents, key = (str(part) for part in location)
    prefix = "".join(f"{parent}." for parent in parents)
    known = _field_aliases(parents)
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"unknown field {prefix}{key} (did you mean {prefix}{close[0]}?)"
    section = f" of {'.'.join(parents)}" if parents else ""
    return f"unknown field {prefix}{key}; known fields{section}: {', '.join(known)}"


def _field_aliases(path: Sequence[str]) -> list[str]:
    """The camelCase keys the section at `path` accepts (the top level for an empty path)."""
    model: type[pydantic.BaseModel] = Configuration
    for part in path:
        if part.isdigit():  # an index into a list of sections
            continue
        section = next(
            (field.annotation for name, field in model.model_fields.items() if part in (name, field.alias)), None
        )
        if typing.get_origin(section) is list:
            [section] = typing.get_args(section)
        if not _is_model(section):
            return []
        model = section
    return [field.alias or name for name, field in model.model_fields.items()]


def _is_model(annotation: object) -> TypeGuard[type[pydantic.BaseModel]]:
    # `dict[str, bool]` passes isinstance(..., type) but is no class: rule generic aliases out first.
    return (
        typing.get_origin(annotation) is None
        and isinstance(annotation, type)
        and issubclass(annotation, pydantic.BaseModel)
    )
