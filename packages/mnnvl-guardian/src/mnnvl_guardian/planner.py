"""What the guardian does with one ComputeDomain: plain facts in, one action out. No I/O, no clock."""

from __future__ import annotations

import enum

from mnnvl_api.decisions import domains

#: How many in-use pods a refusal names; the rest are counted.
NAMED_PODS = 3


class Action(enum.Enum):
    NOTHING = "nothing"
    PROTECT = "protect"  # add the protection finalizer
    RELEASE = "release"  # remove it: the domain is being deleted and nothing uses it


def decide(domain: domains.DomainFacts, *, template_in_use: bool, gate_enabled: bool) -> Action:
    """Only domains managed by mnnvl are ever touched; with the gate disabled nothing is released."""
    if not domain.managed:
        return Action.NOTHING
    if not domain.deleting:
        return Action.NOTHING if domain.protected else Action.PROTECT
    if gate_enabled and domains.may_release(domain, template_in_use=template_in_use):
        return Action.RELEASE
    return Action.NOTHING


def refusal(domain: domains.DomainFacts, users: list[str]) -> str | None:
    """Why deleting `domain` is refused in Deny mode (None: allowed), naming a few of the pods using it."""
    if not domain.managed or not users:
        return None
    named = ", ".join(sorted(users)[:NAMED_PODS])
    more = f" and {len(users) - NAMED_PODS} more" if len(users) > NAMED_PODS else ""
    return (
        f"ComputeDomain {domain.name} is in use by pods {named}{more}: deleting it now would tear down IMEX under "
        f"them (CUDA error 719). Scale down or delete the workload that owns it (workload "
        f'"{domain.workload}"); its ComputeDomain is deleted automatically once its pods are gone'
    )
