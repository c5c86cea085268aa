"""Who controls an object, by its ownerReferences: the links upstream LWS and DisaggregatedSet act on.

Anyone may write an ownerReference or a label, so a reference counts only where it agrees with what else the
object says about its owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import keys


def controller_reference(meta: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The controller ownerReference of `kind` in `meta`, if any."""
    return next(
        (ref for ref in meta.get("ownerReferences") or () if ref.get("controller") and ref.get("kind") == kind), None
    )


def controller_owner(meta: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(apiVersion, kind, name) of the object's controlling owner, whatever its kind; None when it has none."""
    reference = next((ref for ref in meta.get("ownerReferences") or () if ref.get("controller")), None)
    if reference is None:
        return None
    return str(reference.get("apiVersion")), str(reference.get("kind")), str(reference.get("name"))


def disaggregated_set_reference(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller reference to the DisaggregatedSet that the object's `disaggregatedset.x-k8s.io/name` label
    names, if the object has one: of the DisaggregatedSet API group, and of that name."""
    ds_name = (meta.get("labels") or {}).get(keys.DS_NAME_LABEL)
    reference = controller_reference(meta, keys.DS_KIND)
    if (
        ds_name is None
        or reference is None
        or str(reference.get("apiVersion", "")).partition("/")[0] != keys.DS_GROUP
        or reference.get("name") != ds_name
    ):
        return None
    return reference


def controlled_by_disaggregated_set(meta: Mapping[str, Any]) -> bool:
    """True when the object's controller is the DisaggregatedSet its `disaggregatedset.x-k8s.io/name` label names."""
    return disaggregated_set_reference(meta) is not None
