"""What a pod references, and whether it still counts: the facts every deletion decision rests on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def referenced_claim_templates(pod: Mapping[str, Any]) -> frozenset[str]:
    """Names of the ResourceClaimTemplates the pod's claims are generated from."""
    claims = (pod.get("spec") or {}).get("resourceClaims") or ()
    return frozenset(
        str(claim["resourceClaimTemplateName"]) for claim in claims if claim.get("resourceClaimTemplateName")
    )


def is_non_terminal(pod: Mapping[str, Any]) -> bool:
    """A pod counts until it has Succeeded or Failed; a terminating pod still runs and still counts."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def users_of(pods: Iterable[Mapping[str, Any]], claim_template: str) -> list[str]:
    """Names of the non-terminal pods among `pods` that reference `claim_template`."""
    return [str(pod["metadata"]["name"]) for pod in pods if claim_template in live_claim_templates(pod)]


def live_claim_templates(pod: Mapping[str, Any]) -> frozenset[str]:
    """The templates a pod holds in use: those it references while it is non-terminal."""
    return referenced_claim_templates(pod) if is_non_terminal(pod) else frozenset()
