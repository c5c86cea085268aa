"""`mnnvl-guardian`: the protection finalizer of managed ComputeDomains."""

from __future__ import annotations

import sys

from mnnvl_api import keys, models
from mnnvl_runtime import identity, kube, operator, preflight

from . import admission, handlers, state

IDENTITY = identity.Identity(keys.GUARDIAN_CONTROLLER)
COMPUTE_DOMAIN_VERBS = ("get", "list", "watch", "patch")

# Imported for their registrations on `state.registry`.
__all__ = ["admission", "handlers"]


def startup_problems(client: kube.Kube, configuration: models.Configuration) -> list[str]:
    if not configuration.auto_compute_domain:
        return []
    return preflight.compute_domain_problems(client, COMPUTE_DOMAIN_VERBS)


def main() -> None:
    sys.exit(operator.run(IDENTITY, state.registry, preflight=startup_problems))


if __name__ == "__main__":
    main()
