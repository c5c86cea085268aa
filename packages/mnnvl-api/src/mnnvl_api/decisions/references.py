"""What a pod references, and whether it still counts: the facts every deletion decision rests on.

A pod uses a ComputeDomain while it is non-terminal and either holds the domain's channel claim (references
its ResourceClaimTemplate) or records the domain (`compute-domain-name`), as a CPU-only leader does without
holding any claim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .. import keys

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def referenced_claim_templates(pod: Mapping[str, Any]) -> frozenset[str]:
    """Names of the ResourceClaimTemplates the pod's claims are generated from."""
    claims = (pod.get("spec") or {}).get("resourceClaims") or ()
    return frozenset(
        str(claim["resourceClaimTemplateName"]) for claim in claims if claim.get("resourceClaimTemplateName")
    )


def recorded_domain(pod: Mapping[str, Any]) -> str | None:
    """The ComputeDomain recorded on the pod at admission, if any."""
    found = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    return str(found) if found else None


def channel_claim_template(pod: Mapping[str, Any]) -> str | None:
    """The ResourceClaimTemplate of the pod's channel claim (None: it holds none). Unlike the recorded domain, which
    anyone who may edit the pod can change, a pod's claims are fixed at its admission."""
    for claim in (pod.get("spec") or {}).get("resourceClaims") or ():
        if claim.get("name") == keys.CHANNEL_CLAIM_NAME and claim.get("resourceClaimTemplateName"):
            return str(claim["resourceClaimTemplateName"])
    return None


def is_non_terminal(pod: Mapping[str, Any]) -> bool:
    """A pod counts until it has Succeeded or Failed; a terminating pod still runs and still counts."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def uses(pod: Mapping[str, Any], *, domain: str, claim_template: str) -> bool:
    """Whether the pod, still non-terminal, holds the domain's claim or records the domain."""
    return is_non_terminal(pod) and (
        claim_template in referenced_claim_templates(pod) or recorded_domain(pod) == domain
    )


def users_of(pods: Iterable[Mapping[str, Any]], *, domain: str, claim_template: str) -> list[str]:
    """Names of the non-terminal pods among `pods` that hold the domain's claim or record the domain."""
    return [str(pod["metadata"]["name"]) for pod in pods if uses(pod, domain=domain, claim_template=claim_template)]


def live_claim_templates(pod: Mapping[str, Any]) -> frozenset[str]:
    """The templates a pod holds in use: those it references while it is non-terminal."""
    return referenced_claim_templates(pod) if is_non_terminal(pod) else frozenset()


def live_recorded_domain(pod: Mapping[str, Any]) -> str | None:
    """The domain a pod records, while it is non-terminal."""
    return recorded_domain(pod) if is_non_terminal(pod) else None
