"""The revisions upstream LWS v0.10.0 computes from a workload's templates, recomputed in Python, for the golden
tests of mnnvl's template stamps (tests/unit/golden, docs/upgrades.md) and the e2e test that checks them against
the real upstream (e2e/test_revision_hashes.py).

Upstream's LeaderWorkerSet controller decodes the object into its Go types and encodes it again before hashing,
so what is hashed is not the JSON a user wrote: fields Go always writes appear with their zero values
(`"resources":{}`, `"metadata":{}`), empty ones vanish, quantities are canonical ("1024Mi" is "1Gi"), and
defaults of the CRD and of upstream's webhook are filled in. This module models that for the Go types the golden
shapes use, and raises `NotModelledError` for anything else rather than guess: a hash it returns is meant to be exact.

- `template_revision_hash`: the LeaderWorkerSet's `template-revision-hash` (`revision_patch` is what is hashed).
- `ds_revision`: the DisaggregatedSet's revision, the `<rev8>` in its LeaderWorkerSets' names.
- `ds_child`: the LeaderWorkerSet upstream's DisaggregatedSet controller creates for a (slice, revision, role).
"""

from __future__ import annotations

import copy
import dataclasses
import fractions
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from mnnvl_api import keys

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
DS_API_VERSION = "disaggregatedset.x-k8s.io/v1"


class NotModelledError(ValueError):
    """The object uses a field or value this port does not reproduce exactly: extend the port (and check it
    against upstream with the e2e test) before relying on a hash of it."""


# --- Go's types, as far as the shapes need them ---------------------------------------------------------------
#
# A kind is one of the scalar names below, or a tuple: ("ptr", kind), ("list", kind), ("map", kind) (keys are
# strings, encoded sorted), ("struct", name). Each field says how Go's encoder treats its zero value: OMIT_EMPTY
# (`omitempty`; never applies to structs), ALWAYS (no option), OMIT_ZERO (`omitzero`).

Kind = str | tuple[Any, ...]
STRING, INT, BOOL, QUANTITY, INT_OR_STRING, TIME = "string", "int", "bool", "quantity", "int-or-string", "time"
OMIT_EMPTY, ALWAYS, OMIT_ZERO = "omitempty", "always", "omitzero"


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    kind: Kind
    omit: str = OMIT_EMPTY


def _ptr(kind: Kind) -> Kind:
    return ("ptr", kind)


def _list(kind: Kind) -> Kind:
    return ("list", kind)


def _map(kind: Kind) -> Kind:
    return ("map", kind)


def _struct(name: str) -> Kind:
    return ("struct", name)


_STRINGS = _list(STRING)
_SELECTOR = _ptr(_struct("LabelSelector"))
_AFFINITY_TERMS = _list(_struct("PodAffinityTerm"))
_WEIGHTED_TERMS = _list(_struct("WeightedPodAffinityTerm"))

#: Fields in Go declaration order (which the DisaggregatedSet's revision depends on), embedded (`inline`) structs
#: spelled out where they sit. Only what the shapes use; a field not listed raises `NotModelledError`.
TYPES: dict[str, tuple[Field, ...]] = {
    "LeaderWorkerTemplate": (
        Field("leaderTemplate", _ptr(_struct("PodTemplateSpec"))),
        Field("workerTemplate", _struct("PodTemplateSpec"), ALWAYS),
        Field("size", _ptr(INT)),
        Field("restartPolicy", STRING),
        Field("subGroupPolicy", _ptr(_struct("SubGroupPolicy"))),
    ),
    "SubGroupPolicy": (Field("subGroupPolicyType", _ptr(STRING)), Field("subGroupSize", _ptr(INT))),
    "NetworkConfig": (Field("subdomainPolicy", _ptr(STRING), ALWAYS),),
    "PodTemplateSpec": (Field("metadata", _struct("ObjectMeta")), Field("spec", _struct("PodSpec"))),
    "ObjectMeta": (
        Field("name", STRING),
        Field("generateName", STRING),
        Field("creationTimestamp", TIME, OMIT_ZERO),
        Field("labels", _map(STRING)),
        Field("annotations", _map(STRING)),
    ),
    "PodSpec": (
        Field("volumes", _list(_struct("Volume"))),
        Field("initContainers", _list(_struct("Container"))),
        Field("containers", _list(_struct("Container")), ALWAYS),
        Field("restartPolicy", STRING),
        Field("terminationGracePeriodSeconds", _ptr(INT)),
        Field("nodeSelector", _map(STRING)),
        Field("serviceAccountName", STRING),
        Field("affinity", _ptr(_struct("Affinity"))),
        Field("schedulerName", STRING),
        Field("tolerations", _list(_struct("Toleration"))),
        Field("priorityClassName", STRING),
        Field("resourceClaims", _list(_struct("PodResourceClaim"))),
    ),
    "Container": (
        Field("name", STRING, ALWAYS),
        Field("image", STRING),
        Field("command", _STRINGS),
        Field("args", _STRINGS),
        Field("ports", _list(_struct("ContainerPort"))),
        Field("env", _list(_struct("EnvVar"))),
        Field("resources", _struct("ResourceRequirements")),
        Field("restartPolicy", _ptr(STRING)),
        Field("volumeMounts", _list(_struct("VolumeMount"))),
        Field("readinessProbe", _ptr(_struct("Probe"))),
        Field("startupProbe", _ptr(_struct("Probe"))),
    ),
    "ContainerPort": (
        Field("name", STRING),
        Field("containerPort", INT, ALWAYS),
        Field("protocol", STRING),
    ),
    "EnvVar": (
        Field("name", STRING, ALWAYS),
        Field("value", STRING),
        Field("valueFrom", _ptr(_struct("EnvVarSource"))),
    ),
    "EnvVarSource": (Field("secretKeyRef", _ptr(_struct("SecretKeySelector"))),),
    "SecretKeySelector": (
        Field("name", STRING),  # the embedded LocalObjectReference
        Field("key", STRING, ALWAYS),
        Field("optional", _ptr(BOOL)),
    ),
    "ResourceRequirements": (
        Field("limits", _map(QUANTITY)),
        Field("requests", _map(QUANTITY)),
        Field("claims", _list(_struct("ResourceClaim"))),
    ),
    "ResourceClaim": (Field("name", STRING, ALWAYS), Field("request", STRING)),
    "PodResourceClaim": (
        Field("name", STRING, ALWAYS),
        Field("resourceClaimName", _ptr(STRING)),
        Field("resourceClaimTemplateName", _ptr(STRING)),
    ),
    "VolumeMount": (
        Field("name", STRING, ALWAYS),
        Field("readOnly", BOOL),
        Field("mountPath", STRING, ALWAYS),
        Field("subPath", STRING),
    ),
    "Volume": (
        Field("name", STRING, ALWAYS),  # then the embedded VolumeSource
        Field("emptyDir", _ptr(_struct("EmptyDirVolumeSource"))),
        Field("persistentVolumeClaim", _ptr(_struct("PersistentVolumeClaimVolumeSource"))),
    ),
    "EmptyDirVolumeSource": (Field("medium", STRING), Field("sizeLimit", _ptr(QUANTITY))),
    "PersistentVolumeClaimVolumeSource": (Field("claimName", STRING, ALWAYS), Field("readOnly", BOOL)),
    "Probe": (
        Field("httpGet", _ptr(_struct("HTTPGetAction"))),  # the embedded ProbeHandler
        Field("initialDelaySeconds", INT),
        Field("timeoutSeconds", INT),
        Field("periodSeconds", INT),
        Field("successThreshold", INT),
        Field("failureThreshold", INT),
    ),
    "HTTPGetAction": (
        Field("path", STRING),
        Field("port", INT_OR_STRING, ALWAYS),
        Field("scheme", STRING),
    ),
    "Toleration": (
        Field("key", STRING),
        Field("operator", STRING),
        Field("value", STRING),
        Field("effect", STRING),
        Field("tolerationSeconds", _ptr(INT)),
    ),
    "Affinity": (
        Field("podAffinity", _ptr(_struct("PodAffinity"))),
        Field("podAntiAffinity", _ptr(_struct("PodAffinity"))),  # PodAntiAffinity has the same fields
    ),
    "PodAffinity": (
        Field("requiredDuringSchedulingIgnoredDuringExecution", _AFFINITY_TERMS),
        Field("preferredDuringSchedulingIgnoredDuringExecution", _WEIGHTED_TERMS),
    ),
    "PodAffinityTerm": (
        Field("labelSelector", _SELECTOR),
        Field("namespaces", _STRINGS),
        Field("topologyKey", STRING, ALWAYS),
    ),
    "WeightedPodAffinityTerm": (
        Field("weight", INT, ALWAYS),
        Field("podAffinityTerm", _struct("PodAffinityTerm"), ALWAYS),
    ),
    "LabelSelector": (
        Field("matchLabels", _map(STRING)),
        Field("matchExpressions", _list(_struct("LabelSelectorRequirement"))),
    ),
    "LabelSelectorRequirement": (
        Field("key", STRING, ALWAYS),
        Field("operator", STRING, ALWAYS),
        Field("values", _STRINGS),
    ),
}


def encode(value: Any, kind: Kind, path: str = "") -> Any:
    """`value` (decoded JSON; None for absent or null) as Go decodes it into `kind` and encodes it again: structs
    as dicts in field order (zero values as Go writes them), maps sorted by key, quantities canonical. None is
    JSON null."""
    if isinstance(kind, tuple):
        shape, inner = kind
        if shape == "struct":
            return _encode_struct(value, inner, path)
        if value is None:
            return None
        if shape == "ptr":
            return encode(value, inner, path)
        if shape == "list":
            _expect(value, list, path)
            return [encode(item, inner, f"{path}[{index}]") for index, item in enumerate(value)]
        _expect(value, dict, path)
        return {key: encode(value[key], inner, f"{path}.{key}") for key in sorted(value)}
    return _encode_scalar(value, kind, path)


def _encode_struct(value: Any, name: str, path: str) -> dict[str, Any]:
    found = {} if value is None else value
    _expect(found, dict, path)
    fields = TYPES[name]
    unknown = set(found) - {field.name for field in fields}
    if unknown:
        raise NotModelledError(f"{path or name}: fields {sorted(unknown)} of {name} are not modelled")
    encoded: dict[str, Any] = {}
    for field in fields:
        raw = found.get(field.name)
        if field.omit == OMIT_ZERO:
            if raw is not None:
                raise NotModelledError(f"{path}.{field.name}: a non-zero {field.kind} is not modelled")
            continue
        item = encode(raw, field.kind, f"{path}.{field.name}")
        if field.omit == OMIT_EMPTY and _empty(field.kind, item):
            continue
        encoded[field.name] = item
    return encoded


def _empty(kind: Kind, encoded: Any) -> bool:
    """Go's `omitempty`: false, 0, "", a nil pointer, an empty slice or map; never a struct."""
    if isinstance(kind, tuple):
        return kind[0] != "struct" and (encoded is None or (kind[0] in ("list", "map") and len(encoded) == 0))
    return (kind == STRING and encoded == "") or (kind == INT and encoded == 0) or (kind == BOOL and encoded is False)


def _encode_scalar(value: Any, kind: str, path: str) -> Any:
    if kind == STRING:
        return _expect("" if value is None else value, str, path)
    if kind == INT:
        found = 0 if value is None else value
        if isinstance(found, bool) or not isinstance(found, int):
            raise NotModelledError(f"{path}: {found!r} is not an integer")
        return found
    if kind == BOOL:
        return _expect(False if value is None else value, bool, path)
    if kind == QUANTITY:
        return canonical_quantity("0" if value is None else value)
    if kind == INT_OR_STRING:
        found = 0 if value is None else value
        if isinstance(found, bool) or not isinstance(found, int | str):
            raise NotModelledError(f"{path}: {found!r} is neither an integer nor a string")
        return found
    raise NotModelledError(f"{path}: a {kind} value is not modelled")


def _expect(value: Any, kind: type, path: str) -> Any:
    if not isinstance(value, kind):
        raise NotModelledError(f"{path}: expected a {kind.__name__}, found {value!r}")
    return value


# --- resource.Quantity's canonical form ---------------------------------------------------------------------

_QUANTITY = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?([a-zA-Z]*)")
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"": 0, "Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}


def canonical_quantity(value: str | int) -> str:
    """How Go re-encodes a quantity: binary suffixes stay binary (largest exact power of 1024) unless the value is
    below 1024 or fractional; decimal values take the largest SI suffix (a power of 1000) that keeps the number
    whole. Exponent forms ("1e3") and values finer than nano are not modelled."""
    text = str(value)
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match.group(2) or match.group(3)):
        raise NotModelledError(f"quantity {text!r} is not modelled")
    sign, whole, fraction, suffix = match.groups()
    number = fractions.Fraction(int(whole or "0")) + (
        fractions.Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0
    )
    if sign == "-":
        number = -number
    binary = suffix in _BINARY_SUFFIXES and suffix != ""
    if binary:
        number *= 1024 ** _BINARY_SUFFIXES[suffix]
    elif suffix in _DECIMAL_SUFFIXES:
        number *= fractions.Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    else:
        raise NotModelledError(f"quantity {text!r}: suffix {suffix!r} is not modelled")
    if number == 0:
        return "0"
    if (number * 10**9).denominator != 1:
        raise NotModelledError(f"quantity {text!r} is finer than nano; Go rounds it, which is not modelled")
    if binary and abs(number) >= 1024 and number.denominator == 1:
        power = 0
        while power < 6 and number % 1024 ** (power + 1) == 0:
            power += 1
        names = {index: name for name, index in _BINARY_SUFFIXES.items()}
        return f"{int(number / 1024**power)}{names[power]}"
    exponent = -9
    while exponent < 18 and (number / fractions.Fraction(10) ** (exponent + 3)).denominator == 1:
        exponent += 3
    names = {index: name for name, index in _DECIMAL_SUFFIXES.items()}
    return f"{int(number / fractions.Fraction(10) ** exponent)}{names[exponent]}"


# --- Go's encoding/json output ----------------------------------------------------------------------------


def go_json(value: Any, *, sort_keys: bool) -> bytes:
    """`value` as Go's json.Marshal writes it: compact, UTF-8, `<`, `>`, `&`, U+2028 and U+2029 escaped. Go sorts
    map keys; structs keep field order (`sort_keys=False` with dicts built by `encode`)."""
    text = json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028")):
        text = text.replace(char, escaped)
    return text.replace("\u2029", "\\u2029").encode()


# --- LeaderWorkerSet: defaults and the template revision hash -------------------------------------------------


def _default_pod_template(template: dict[str, Any]) -> None:
    """The CRD's defaults inside a pod template that the modelled types can hold: a port's protocol."""
    spec = template.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for port in container.get("ports") or []:
            port.setdefault("protocol", "TCP")


def _default_leader_worker_template(template: dict[str, Any]) -> None:
    """The CRD's defaults of a `leaderWorkerTemplate` (the same in a LeaderWorkerSet and a DisaggregatedSet role)."""
    template.setdefault("size", 1)
    template.setdefault("restartPolicy", "RecreateGroupOnPodRestart")
    if template.get("subGroupPolicy") is not None:
        template["subGroupPolicy"].setdefault("subGroupPolicyType", "LeaderWorker")
    for field in ("leaderTemplate", "workerTemplate"):
        if template.get(field) is not None:
            _default_pod_template(template[field])


def defaulted_lws_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The hashed part of a LeaderWorkerSet spec as upstream's controller reads it: after the CRD's defaults and
    upstream's mutating webhook (restart policy `Default` is `None`; `networkConfig.subdomainPolicy` is Shared)."""
    found = copy.deepcopy(dict(spec))
    template = found.setdefault("leaderWorkerTemplate", {})
    _default_leader_worker_template(template)
    if template["restartPolicy"] == "Default":
        template["restartPolicy"] = "None"
    network = found.get("networkConfig") or {}
    network.setdefault("subdomainPolicy", "Shared")
    found["networkConfig"] = network
    return found


def revision_patch(lws: Mapping[str, Any]) -> bytes:
    """What upstream hashes (and stores as its ControllerRevision's data): a strategic-merge patch replacing
    `spec.leaderWorkerTemplate` and `spec.networkConfig`, as Go writes a map decoded from the typed object:
    every key sorted."""
    spec = defaulted_lws_spec(lws.get("spec") or {})
    unhashed = set(spec) - {"leaderWorkerTemplate", "networkConfig", "replicas", "rolloutStrategy", "startupPolicy"}
    if unhashed:
        raise NotModelledError(f"spec fields {sorted(unhashed)} are not modelled")
    template = encode(spec["leaderWorkerTemplate"], _struct("LeaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    network = encode(spec["networkConfig"], _struct("NetworkConfig"), "spec.networkConfig")
    patch = {"spec": {"leaderWorkerTemplate": {**template, "$patch": "replace"}}}
    patch["spec"]["networkConfig"] = {**network, "$patch": "replace"}
    return go_json(patch, sort_keys=True)


_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def fnv32(data: bytes) -> int:
    """FNV-1 (multiply, then xor), 32 bits: Go's `hash/fnv.New32`."""
    value = 2166136261
    for byte in data:
        value = (value * 16777619) % 2**32
        value ^= byte
    return value


def template_revision_hash(lws: Mapping[str, Any]) -> str:
    """The `leaderworkerset.sigs.k8s.io/template-revision-hash` upstream gives the LeaderWorkerSet's templates:
    the FNV-1 hash of `revision_patch` in decimal, each digit mapped to a letter or digit of a vowel-free
    alphabet (apimachinery's `rand.SafeEncodeString`)."""
    return "".join(_SAFE_ALPHABET[ord(digit) % len(_SAFE_ALPHABET)] for digit in str(fnv32(revision_patch(lws))))


# --- DisaggregatedSet: its revision and its LeaderWorkerSets ------------------------------------------------------


def defaulted_roles(ds: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The roles as upstream's DisaggregatedSet controller reads them: after the CRD's defaults (it has no
    mutating webhook)."""
    roles = copy.deepcopy(list((ds.get("spec") or {}).get("roles") or []))
    for role in roles:
        _default_leader_worker_template(role.setdefault("spec", {}).setdefault("leaderWorkerTemplate", {}))
    return roles


def ds_revision(ds: Mapping[str, Any]) -> str:
    """The DisaggregatedSet's revision: the first 8 hex digits of the SHA-256 of its roles' names and
    `leaderWorkerTemplate`s, in spec order, as Go marshals the typed list (struct fields in declaration order)."""
    listed = [
        {
            "name": role["name"],
            "template": encode(
                role["spec"]["leaderWorkerTemplate"],
                _struct("LeaderWorkerTemplate"),
                f"spec.roles[{index}].spec.leaderWorkerTemplate",
            ),
        }
        for index, role in enumerate(defaulted_roles(ds))
    ]
    return hashlib.sha256(go_json(listed, sort_keys=False)).hexdigest()[:8]


def ds_child_name(ds_name: str, slice_index: int, revision: str, role: str) -> str:
    return f"{ds_name}-{slice_index}-{revision}-{role}"


def _placement_terms(ds_name: str, slice_index: int, policy: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """The pod affinity and anti-affinity terms upstream adds for the set's placement policy."""
    topology = policy.get("topology") or ""
    kind = policy.get("type") or "None"
    if kind == "None" or not topology:
        return [], []

    def term(*expressions: dict[str, Any]) -> dict[str, Any]:
        return {"labelSelector": {"matchExpressions": list(expressions)}, "topologyKey": topology}

    def requirement(key: str, operator: str, *values: str) -> dict[str, Any]:
        return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}

    this_set = requirement(keys.DS_NAME_LABEL, "In", ds_name)
    # Together: this set's pods of this slice. Apart: this set's pods of another slice (for slice 0 the label
    # must exist: an unlabelled legacy pod is slice 0).
    together = term(this_set, requirement(keys.DS_SLICE_LABEL, "In", str(slice_index)))
    labelled = [requirement(keys.DS_SLICE_LABEL, "Exists")] if slice_index == 0 else []
    apart = [term(this_set, *labelled, requirement(keys.DS_SLICE_LABEL, "NotIn", str(slice_index)))]
    if kind == "ExclusiveTopology":
        apart.append(
            term(
                requirement(keys.DS_NAME_LABEL, "Exists"),
                requirement(keys.DS_NAME_LABEL, "NotIn", ds_name),
                requirement(keys.DS_SLICE_LABEL, "Exists"),
            )
        )
    elif kind != "ExclusiveSlice":
        raise NotModelledError(f"placement policy {kind!r} is not modelled")
    return [together], apart


def _place(template: dict[str, Any], labels: Mapping[str, str], ds_name: str, slice_index: int, policy: Any) -> None:
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}  # upstream's labels win
    if not meta.get("annotations"):
        meta.pop("annotations", None)
    together, apart = _placement_terms(ds_name, slice_index, policy or {})
    if not together:
        return
    affinity = template.setdefault("spec", {}).setdefault("affinity", {})
    for field, terms in (("podAffinity", together), ("podAntiAffinity", apart)):
        section = affinity.get(field) or {}
        section["requiredDuringSchedulingIgnoredDuringExecution"] = [
            *(section.get("requiredDuringSchedulingIgnoredDuringExecution") or []),
            *terms,
        ]
        affinity[field] = section


def ds_child(ds: Mapping[str, Any], slice_index: int, role_name: str, *, replicas: int) -> dict[str, Any]:
    """The LeaderWorkerSet upstream creates for `role_name` in slice `slice_index` of the set's current revision:
    the role's spec and metadata, upstream's labels merged over the role's in the LeaderWorkerSet and both pod
    templates, the placement policy's affinity terms appended in both, controlled by the set."""
    meta = ds.get("metadata") or {}
    ds_name = str(meta.get("name"))
    revision = ds_revision(ds)
    role = next(found for found in defaulted_roles(ds) if found["name"] == role_name)
    labels = {
        "app": f"{ds_name}-{slice_index}-{role_name}",
        keys.DS_ROLE_LABEL: role_name,
        keys.DS_SLICE_LABEL: str(slice_index),
        keys.DS_NAME_LABEL: ds_name,
        keys.DS_REVISION_LABEL: revision,
    }
    spec = role["spec"]
    spec["replicas"] = replicas
    policy = (ds.get("spec") or {}).get("placementPolicy")
    for field in ("leaderTemplate", "workerTemplate"):
        if spec["leaderWorkerTemplate"].get(field) is not None:
            _place(spec["leaderWorkerTemplate"][field], labels, ds_name, slice_index, policy)
    role_meta = role.get("metadata") or {}
    child_meta: dict[str, Any] = {
        "name": ds_child_name(ds_name, slice_index, revision, role_name),
        "labels": {**(role_meta.get("labels") or {}), **labels},
        "ownerReferences": [
            {
                "apiVersion": DS_API_VERSION,
                "kind": "DisaggregatedSet",
                "name": ds_name,
                "uid": str(meta.get("uid", "")),
                "controller": True,
            }
        ],
    }
    if role_meta.get("annotations"):
        child_meta["annotations"] = dict(role_meta["annotations"])
    if meta.get("namespace"):
        child_meta["namespace"] = meta["namespace"]
    return {"apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet", "metadata": child_meta, "spec": spec}
