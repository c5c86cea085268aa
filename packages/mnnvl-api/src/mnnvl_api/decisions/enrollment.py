"""Which ComputeDomain scope each DisaggregatedSet role gets: the slice's, one per replica, or none."""

from __future__ import annotations

import dataclasses
import enum

from .. import errors, keys
from ..models import disaggregatedset
from .opt_in import OptIn, read_opt_in


class RoleScope(enum.Enum):
    SLICE = keys.SCOPE_SLICE
    REPLICA = keys.SCOPE_REPLICA
    NONE = "none"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Enrollment:
    scopes: dict[str, RoleScope]
    errors: list[errors.FieldError]

    @property
    def slice_roles(self) -> list[str]:
        return [role for role, scope in self.scopes.items() if scope is RoleScope.SLICE]


def enroll_roles(ds: disaggregatedset.DisaggregatedSet) -> Enrollment:
    """Decide each role's scope from the DS annotation and the role's own annotations.

    A role's `disaggregatedset.x-k8s.io/auto-compute-domain` overrides the DS's (`disabled` opts it out of
    the slice domain); its `leaderworkerset.sigs.k8s.io/auto-compute-domain: enabled` asks for per-replica
    domains. Asking for both is a conflict: a pod can join only one IMEX domain.
    """
    found: list[errors.FieldError] = []
    ds_opt_in = read_opt_in(ds.metadata.annotations, keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION)
    if isinstance(ds_opt_in, errors.FieldError):
        found.append(ds_opt_in)
        ds_opt_in = None
    scopes: dict[str, RoleScope] = {}
    for index, role in enumerate(ds.spec.roles):
        path = f"spec.roles[{index}]"
        role_slice = read_opt_in(role.metadata.annotations, keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION, path=path)
        role_replica = read_opt_in(role.metadata.annotations, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION, path=path)
        role_errors = [value for value in (role_slice, role_replica) if isinstance(value, errors.FieldError)]
        if role_errors:
            found.extend(role_errors)
            scopes[role.name] = RoleScope.NONE
            continue
        in_slice = role_slice is OptIn.ENABLED or (role_slice is None and ds_opt_in is OptIn.ENABLED)
        per_replica = role_replica is OptIn.ENABLED
        if in_slice and per_replica:
            found.append(_conflict(path, role.name, inherited=role_slice is None))
            scopes[role.name] = RoleScope.NONE
        elif in_slice:
            scopes[role.name] = RoleScope.SLICE
        elif per_replica:
            scopes[role.name] = RoleScope.REPLICA
        else:
            scopes[role.name] = RoleScope.NONE
    return Enrollment(scopes=scopes, errors=found)


def _conflict(path: str, role: str, *, inherited: bool) -> errors.FieldError:
    source = (
        f"the DisaggregatedSet's {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION}"
        if inherited
        else f"the role's own {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION}"
    )
    return errors.invalid(
        errors.annotation_path(path, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION),
        keys.OPT_IN_ENABLED,
        f'role "{role}" is already enrolled in the slice ComputeDomain by {source}, and a pod can join only one '
        f'ComputeDomain; set {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION}: "disabled" on this role to give it '
        "per-replica ComputeDomains, or remove this annotation to keep it in the slice ComputeDomain",
    )
