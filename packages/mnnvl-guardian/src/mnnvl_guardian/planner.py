"""What the guardian does with one ComputeDomain: plain facts in, one action out. No I/O, no clock."""

from __future__ import annotations

import datetime
import enum
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mnnvl_api.decisions import domains

#: How many in-use pods a refusal names; the rest are counted.
NAMED_PODS = 3
#: How many stuck pods the force-delete command of a refusal names; the rest are counted.
NAMED_STUCK_PODS = 10


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


def node_lost(node: Mapping[str, Any] | None) -> bool:
    """Whether a node can no longer finish its pods: gone, or not reporting Ready."""
    if node is None:
        return True
    conditions = (node.get("status") or {}).get("conditions") or ()
    return not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_stuck(pod: Mapping[str, Any], *, now: datetime.datetime, lost_nodes: Collection[str]) -> bool:
    """Terminating and unable to finish on its own: past its grace period (the API server sets `deletionTimestamp`
    to when the grace period ends), or on a node that is lost (`node_lost`), whose kubelet will never confirm."""
    meta = pod.get("metadata") or {}
    deletion = meta.get("deletionTimestamp")
    if not deletion:
        return False
    ends = datetime.datetime.fromisoformat(str(deletion).replace("Z", "+00:00"))
    return ends <= now or (pod.get("spec") or {}).get("nodeName") in lost_nodes


def refusal(domain: domains.DomainFacts, users: Sequence[str], *, stuck: Collection[str] = ()) -> str | None:
    """Why deleting `domain` is refused in Deny mode (None: allowed), naming a few of the pods using it; pods of
    them that are `stuck` Terminating are named apart, with the command that lets them (and the domain) go."""
    if not domain.managed or not users:
        return None
    using = sorted(set(users) - set(stuck))
    held = sorted(set(stuck) & set(users))
    parts: list[str] = []
    if using:
        parts.append(
            f"ComputeDomain {domain.name} is in use by pods {_named(using, NAMED_PODS)}: deleting it now would tear "
            f"down IMEX under them (CUDA error 719). Scale down or delete the workload that owns it (workload "
            f'"{domain.workload}"); its ComputeDomain is deleted automatically once its pods are gone'
        )
    if held:
        subject = "It is also held" if using else f"ComputeDomain {domain.name} is held"
        command = (
            f"kubectl delete pod -n {domain.namespace} --force --grace-period=0 {' '.join(held[:NAMED_STUCK_PODS])}"
        )
        rest = len(held) - NAMED_STUCK_PODS
        parts.append(
            f"{subject} by {len(held)} pod(s) stuck Terminating (past their grace period, or on a node that is "
            f"NotReady or gone), which cannot finish on their own. Once you have made sure they no longer run (their "
            f"node is down), force-delete them: {command}"
            + (f" (and the {rest} more likewise)" if rest > 0 else "")
            + "; the deletion is allowed once no pod uses the domain"
        )
    return ". ".join(parts)


def unverified(domain: domains.DomainFacts, seconds: float) -> str:
    """Why deleting `domain` is refused when its use could not be checked in time: never allowed unchecked."""
    return (
        f"ComputeDomain {domain.name}: could not confirm within {seconds:g}s that no pod uses it (the API server "
        f"is slow or unreachable), so its deletion is refused rather than risk tearing down IMEX under a running "
        f"pod; retry the deletion"
    )


def _named(names: Sequence[str], limit: int) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
