"""Reading the `auto-compute-domain` annotations: `enabled`, `disabled`, or unset — nothing else."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from .. import errors, keys


class OptIn(enum.Enum):
    ENABLED = keys.OPT_IN_ENABLED
    DISABLED = keys.OPT_IN_DISABLED


def read_opt_in(annotations: Mapping[str, str], key: str, *, path: str = "") -> OptIn | errors.FieldError | None:
    """The annotation's value, `None` when unset, or a field error naming the key, the value and the choices.

    `path` is where the annotations live (`""` for the object's own, `spec.roles[1]` for a role).
    Values are matched exactly: `true`, `Enabled` or ` enabled` are errors, not guesses.
    """
    value = annotations.get(key)
    if value is None:
        return None
    for choice in OptIn:
        if value == choice.value:
            return choice
    return errors.unsupported(errors.annotation_path(path, key), value, keys.OPT_IN_VALUES, "or remove the annotation")


def is_opted_in(annotations: Mapping[str, str], key: str) -> bool:
    """True only for a valid `enabled`; unset, `disabled` and invalid values all mean no."""
    return read_opt_in(annotations, key) is OptIn.ENABLED


@dataclasses.dataclass(frozen=True, kw_only=True)
class Environment:
    """What admission depends on besides the object: the feature gate and whether ComputeDomains are served."""

    gate_enabled: bool
    api_served: bool


def opt_in_refusals(path: str, env: Environment) -> list[errors.FieldError]:
    """Why a new opt-in at `path` is refused now (empty: it is not): the gate is off or the API not served.

    Only new opt-ins are refused: objects that opted in earlier stay updatable."""
    if not env.gate_enabled:
        return [
            errors.forbidden(
                path,
                "the AutoComputeDomain feature gate is disabled; set featureGates.AutoComputeDomain=true (Helm) "
                "or AutoComputeDomain: true (Configuration), or remove the annotation",
            )
        ]
    if not env.api_served:
        return [
            errors.forbidden(
                path,
                "the ComputeDomain API (computedomains.resource.nvidia.com/v1beta1) is not served; install the "
                "NVIDIA DRA driver with ComputeDomain support, or remove the annotation",
            )
        ]
    return []
