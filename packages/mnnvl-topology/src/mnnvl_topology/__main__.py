"""`mnnvl-topology`: KAI Topologies and Grove bindings from configuration, and the clique census."""

from __future__ import annotations

import sys

from mnnvl_api import keys, models
from mnnvl_runtime import identity, kube, operator, preflight

from . import handlers, state

IDENTITY = identity.Identity(keys.TOPOLOGY_CONTROLLER)
TOPOLOGY_VERBS = ("get", "list", "watch", "create", "patch", "delete")
NO_KAI = (
    f"topology-aware scheduling needs KAI Scheduler: the Topology API ({keys.KAI_TOPOLOGY_PLURAL}."
    f"{keys.KAI_TOPOLOGY_API_VERSION}) is not served; install KAI Scheduler, or do not run {keys.TOPOLOGY_CONTROLLER} "
    "(the chart's topology.enabled=false)"
)

# Imported for its registrations on `state.registry`.
__all__ = ["handlers"]


def problems(client: kube.Kube, configuration: models.Configuration) -> list[str]:
    """Why mnnvl-topology cannot run (empty: it can): KAI's Topology API must be served and usable."""
    if not preflight.is_served(client, keys.KAI_TOPOLOGY_API_VERSION, keys.KAI_TOPOLOGY_PLURAL):
        return [NO_KAI]
    access = preflight.Access(group=keys.KAI_TOPOLOGY_GROUP, resource=keys.KAI_TOPOLOGY_PLURAL, verbs=TOPOLOGY_VERBS)
    missing = preflight.missing_access(client, [access])
    if missing:
        return [f"this controller's service account may not {', '.join(missing)}: grant it in its ClusterRole"]
    return []


def main() -> None:
    sys.exit(
        operator.run(
            IDENTITY,
            state.registry,
            preflight=problems,
            watch_selectors=handlers.WATCH_SELECTORS,
            serves_webhooks=False,  # it has no webhook, and the chart mounts it no certificate
        )
    )


if __name__ == "__main__":
    main()
