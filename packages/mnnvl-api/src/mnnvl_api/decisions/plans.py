"""What a scope controller's planner decides for one workload, as values: the writes its executor makes.

Every scope (replica, slice) plans in these terms, so one executor (`mnnvl_runtime.executing`) applies the
plans of both. Converged input yields an empty `Plan`.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class DomainToCreate:
    name: str
    namespace: str
    claim_template: str
    labels: dict[str, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRef:
    name: str
    uid: str
    #: Where its gate was seen (lets the gate go in one patch; None: read the pod first).
    gate_at: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Warning:
    reason: str
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    create: tuple[DomainToCreate, ...] = ()
    ungate: tuple[PodRef, ...] = ()
    delete: tuple[str, ...] = ()  # domain names, for the fenced deletion
    uncondemn: tuple[str, ...] = ()  # condemned domains that are wanted again
    release: tuple[str, ...] = ()  # domain names whose protection finalizer may go
    warnings: tuple[Warning, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.create or self.ungate or self.delete or self.uncondemn or self.release or self.warnings)
