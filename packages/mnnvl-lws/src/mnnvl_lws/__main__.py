"""`mnnvl-lws`: the replica-scope ComputeDomain controller."""

from __future__ import annotations

import sys

from mnnvl_api import keys, models
from mnnvl_runtime import identity, kube, operator, preflight

from . import admission, handlers, state

IDENTITY = identity.Identity(keys.LWS_CONTROLLER)
COMPUTE_DOMAIN_VERBS = ("get", "list", "watch", "create", "delete", "patch")

# Imported for their registrations on `state.registry`.
__all__ = ["admission", "handlers"]


def startup_problems(client: kube.Kube, configuration: models.Configuration) -> list[str]:
    """With the gate on, ComputeDomains must be served and this controller allowed to manage them."""
    if not configuration.auto_compute_domain:
        return []
    return preflight.compute_domain_problems(client, COMPUTE_DOMAIN_VERBS)


def main() -> None:
    sys.exit(operator.run(IDENTITY, state.registry, preflight=startup_problems))


if __name__ == "__main__":
    main()
