"""Pure decisions of mnnvl-topology about its objects: the KAI Topologies and Grove bindings a configuration asks
for, whose the ones found are and what to do about them, and the APIs served after start-up. No I/O, no clock."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mnnvl_api import keys
from mnnvl_api.decisions import domains, ownership
from mnnvl_api.models import configuration

Object = dict[str, Any]
OURS = {keys.MANAGED_BY_LABEL: keys.TOPOLOGY_CONTROLLER}


class Action(enum.Enum):
    KEEP = "keep"
    CREATE = "create"
    #: Apply the desired object over the existing one (KAI v0.17+ aliases; a Grove binding's mutable spec).
    PATCH = "patch"
    #: Delete and create again: the API server refuses the change in place.
    RECREATE = "recreate"
    #: An earlier version's object, as desired: apply the desired object, which records this installation on it.
    ADOPT = "adopt"
    #: A same-named object this installation did not create: never touched.
    FOREIGN = "foreign"


class Provenance(enum.Enum):
    """Who made an object found under a name of ours, as far as the API server's records tell."""

    #: This installation: our field manager alone wrote the managed-by label and the installation annotation,
    #: and the annotation names this installation.
    OURS = "ours"
    #: An earlier version of ours: our field manager alone wrote the managed-by label, and no installation is
    #: recorded. Adopted under a configured name; never deleted (it may be another installation's).
    LEGACY = "legacy"
    #: Another installation of mnnvl-topology: our field manager wrote it for the installation it records.
    OTHER_INSTALLATION = "other-installation"
    #: Anyone else: not labelled ours, or labelled so by another field manager (a copied manifest, a restore).
    FOREIGN = "foreign"


# --- desired objects ---------------------------------------------------------------------------------------


def _metadata(name: str, installation: str) -> Object:
    return {"name": name, "labels": dict(OURS), "annotations": {keys.INSTALLATION_ANNOTATION: installation}}


def desired_topology(entry: configuration.TopologySettings, *, aliases: bool, installation: str) -> Object:
    """The KAI Topology for `entry`; `aliases`: whether the served schema has `levels[].alias` (KAI v0.17+)."""
    levels: list[Object] = []
    for level in entry.levels:
        wanted: Object = {"nodeLabel": level.node_label}
        if aliases and level.alias is not None:
            wanted["alias"] = level.alias
        levels.append(wanted)
    return {
        "apiVersion": keys.KAI_TOPOLOGY_API_VERSION,
        "kind": keys.KAI_TOPOLOGY_KIND,
        "metadata": _metadata(entry.name, installation),
        "spec": {"levels": levels},
    }


def desired_binding(entry: configuration.TopologySettings, *, installation: str) -> Object | None:
    """The Grove ClusterTopologyBinding for `entry` (None when disabled). It always names the KAI Topology in
    `schedulerTopologyBindings`: without it Grove would create and own a Topology of the binding's name."""
    if not entry.grove_binding.enabled:
        return None
    return {
        "apiVersion": keys.GROVE_API_VERSION,
        "kind": keys.GROVE_BINDING_KIND,
        "metadata": _metadata(entry.binding_name, installation),
        "spec": {
            "levels": [{"domain": level.grove_domain, "key": level.node_label} for level in entry.levels],
            "schedulerTopologyBindings": [
                {"schedulerName": entry.grove_binding.scheduler_name, "topologyReference": entry.name}
            ],
        },
    }


# --- what to do about what exists ----------------------------------------------------------------------------


def labelled_as_ours(found: Mapping[str, Any]) -> bool:
    """Whether the object carries our managed-by label: a candidate only, anyone can write a label."""
    labels = (found.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(keys.MANAGED_BY_LABEL) == keys.TOPOLOGY_CONTROLLER)


def recorded_installation(found: Mapping[str, Any]) -> str | None:
    annotations = (found.get("metadata") or {}).get("annotations") or {}
    recorded = annotations.get(keys.INSTALLATION_ANNOTATION)
    return None if recorded is None else str(recorded)


def provenance(found: Mapping[str, Any], *, installation: str) -> Provenance:
    """Who made `found`: our field manager must alone own its managed-by label and, when there is one, its
    installation annotation (`managedFields`, as for ComputeDomains); the annotation then says which installation."""
    if not labelled_as_ours(found):
        return Provenance.FOREIGN
    recorded = recorded_installation(found)
    identity = (keys.INSTALLATION_ANNOTATION,) if recorded is not None else ()
    meta = found.get("metadata") or {}
    if domains.identity_owner(meta, labels=(keys.MANAGED_BY_LABEL,), annotations=identity) != keys.TOPOLOGY_CONTROLLER:
        return Provenance.FOREIGN
    if recorded is None:
        return Provenance.LEGACY
    return Provenance.OURS if recorded == installation else Provenance.OTHER_INSTALLATION


def foreign_owner(found: Mapping[str, Any], *, installation: str) -> str:
    """Who the same-named object belongs to, for the Warning: its controlling owner (Grove creates and owns a
    Topology for a binding without a `kai-scheduler` entry), the other installation it records, the field managers
    that wrote our label on it (a copied manifest, a restore), its manager label, or nobody we know."""
    meta = found.get("metadata") or {}
    if (owner := ownership.controller_owner(meta)) is not None:
        return f"owned by {owner[1]} {owner[2]}"
    if provenance(found, installation=installation) is Provenance.OTHER_INSTALLATION:
        return f"made by the installation {recorded_installation(found)} of {keys.TOPOLOGY_CONTROLLER}"
    if labelled_as_ours(found):
        writers = domains.field_owners(meta, "labels", keys.MANAGED_BY_LABEL) | domains.field_owners(
            meta, "annotations", keys.INSTALLATION_ANNOTATION
        )
        return (
            f"labelled {keys.MANAGED_BY_LABEL}={keys.TOPOLOGY_CONTROLLER} but written by "
            f"{', '.join(sorted(writers)) or 'no recorded field manager'}, not by {keys.TOPOLOGY_CONTROLLER} alone "
            "(managedFields)"
        )
    manager = (meta.get("labels") or {}).get(keys.MANAGED_BY_LABEL)
    return f"managed by {manager}" if manager else f"not labelled {keys.MANAGED_BY_LABEL}={keys.TOPOLOGY_CONTROLLER}"


def _levels(topology: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    return [
        (str(level.get("nodeLabel")), level.get("alias"))
        for level in ((topology.get("spec") or {}).get("levels") or ())
    ]


def _may_write(found: Mapping[str, Any], *, installation: str) -> bool:
    """Only this installation's objects, and an earlier version's under a configured name, are ever written."""
    return provenance(found, installation=installation) in (Provenance.OURS, Provenance.LEGACY)


def _adopting(action: Action, found: Mapping[str, Any], *, installation: str) -> Action:
    """An earlier version's object in shape still needs this installation recorded on it."""
    legacy = provenance(found, installation=installation) is Provenance.LEGACY
    return Action.ADOPT if action is Action.KEEP and legacy else action


def decide_topology(
    desired: Mapping[str, Any], found: Mapping[str, Any] | None, *, aliases: bool, installation: str
) -> Action:
    """KAI <= v0.16 refuses any edit of `spec.levels`; v0.17+ (`aliases`) refuses only a new nodeLabel sequence.
    So a new sequence always recreates, and new aliases are patched in place where the schema has them."""
    if found is None:
        return Action.CREATE
    if not _may_write(found, installation=installation):
        return Action.FOREIGN
    wanted, present = _levels(desired), _levels(found)
    if wanted == present:
        action = Action.KEEP
    elif aliases and [label for label, _ in wanted] == [label for label, _ in present]:
        action = Action.PATCH
    else:
        action = Action.RECREATE
    return _adopting(action, found, installation=installation)


def decide_binding(desired: Mapping[str, Any], found: Mapping[str, Any] | None, *, installation: str) -> Action:
    """A binding's spec is mutable: patch it back whenever it differs (levels, scheduler bindings)."""
    if found is None:
        return Action.CREATE
    if not _may_write(found, installation=installation):
        return Action.FOREIGN
    spec, present = desired["spec"], found.get("spec") or {}
    same = all(present.get(field) == value for field, value in spec.items())
    return _adopting(Action.KEEP if same else Action.PATCH, found, installation=installation)


def removable(found: Mapping[str, Any], *, wanted: Iterable[str], installation: str) -> bool:
    """Whether `found` is to be deleted: this installation made it and the configuration no longer names it. An
    earlier version's object is not: nothing says which installation made it."""
    name = (found.get("metadata") or {}).get("name")
    return name not in set(wanted) and provenance(found, installation=installation) is Provenance.OURS


def conditional(desired: Mapping[str, Any], found: Mapping[str, Any]) -> Object:
    """`desired` applied only over `found` as read (its resourceVersion a precondition): an object replaced or
    relabelled meanwhile makes the write fail (409) instead of taking it over."""
    meta = {**desired["metadata"], "resourceVersion": found["metadata"]["resourceVersion"]}
    return {**desired, "metadata": meta}


def schema_has_aliases(crd: Mapping[str, Any] | None) -> bool:
    """Whether the served KAI Topology schema has `levels[].alias` (v0.17+): the served version is read from the
    CRD the API server enforces, not from configuration, since KAI may be upgraded under us."""
    for version in ((crd or {}).get("spec") or {}).get("versions") or ():
        if version.get("name") != keys.KAI_TOPOLOGY_VERSION:
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        levels = schema.get("properties", {}).get("spec", {}).get("properties", {}).get("levels", {})
        return "alias" in (levels.get("items") or {}).get("properties", {})
    return False


def dropped_aliases(entry: configuration.TopologySettings, *, aliases: bool) -> list[str]:
    """The configured aliases `desired_topology` leaves out: all of them where the served schema has none."""
    return [] if aliases else [level.alias for level in entry.levels if level.alias is not None]


def aliases_ignored_message(name: str, dropped: Sequence[str]) -> str:
    """The Warning for a Topology written without its configured aliases (KAI <= v0.16)."""
    return (
        f"{keys.KAI_TOPOLOGY_KIND} {name} is written without its aliases {', '.join(dropped)}: the served "
        f"{keys.KAI_TOPOLOGY_CRD} schema has no levels[].alias; KAI Scheduler v0.17+ is needed for them, until "
        "then name the levels by their nodeLabel"
    )


def obsolete(ours: Iterable[str], wanted: Iterable[str]) -> list[str]:
    """Names of our objects the configuration no longer asks for."""
    return sorted(set(ours) - set(wanted))


def refusal_message(kind: str, name: str, *, status: int | None, body: object) -> str:
    """The Warning for a call the API server refused, with its own message (a webhook's reason is in it)."""
    said: object = None
    if isinstance(body, str | bytes):
        try:
            said = json.loads(body).get("message")
        except (ValueError, AttributeError):
            said = body.decode(errors="replace") if isinstance(body, bytes) else body
    return (
        f"{kind} {name} could not be written by {keys.TOPOLOGY_CONTROLLER}: the API server answered {status}"
        + (f": {said}" if said else "")
        + "; the other topologies are still kept, and this one is retried with back-off"
    )


# --- APIs served after start-up -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptionalApi:
    """An API mnnvl-topology works without and watches when it is served at start-up. kopf looks for the
    resources it watches only then (CRD scanning is off), so one served later is watched after a restart only."""

    api_version: str
    plural: str
    #: What goes unseen until its watch starts.
    unseen: str

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.api_version.partition('/')[0]}"


GROVE_BINDINGS = OptionalApi(
    api_version=keys.GROVE_API_VERSION,
    plural=keys.GROVE_BINDING_PLURAL,
    unseen="an edited binding is restored by the periodic pass only, not at once",
)
COMPUTE_DOMAINS = OptionalApi(
    api_version=keys.COMPUTE_DOMAIN_API_VERSION,
    plural=keys.COMPUTE_DOMAIN_PLURAL,
    unseen="the clique census does not count pods holding a channel of a ComputeDomain made by hand",
)
OPTIONAL_APIS = (GROVE_BINDINGS, COMPUTE_DOMAINS)


def served_since_start_up(
    unwatched: Iterable[OptionalApi], served: Iterable[OptionalApi], reported: Iterable[OptionalApi]
) -> list[OptionalApi]:
    """The APIs to report now: not served at start-up (so never watched), served now, and not reported yet."""
    new = (set(unwatched) & set(served)) - set(reported)
    return [api for api in OPTIONAL_APIS if api in new]


def restart_message(api: OptionalApi, *, namespace: str) -> str:
    """The Warning for an API served since start-up: what is missed, and the restart that starts its watch."""
    return (
        f"{api.name} is served now but was not when {keys.TOPOLOGY_CONTROLLER} started, so it is not watched: "
        f"{api.unseen}; restart {keys.TOPOLOGY_CONTROLLER} to watch it, e.g. "
        f"kubectl -n {namespace} rollout restart deployment/{keys.TOPOLOGY_CONTROLLER}"
    )
