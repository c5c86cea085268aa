"""`mnnvl-lws`: the replica-scope ComputeDomain controller."""

from __future__ import annotations

import sys

from mnnvl_api import keys
from mnnvl_runtime import identity, operator, preflight

from . import admission, handlers, state

IDENTITY = identity.Identity(keys.LWS_CONTROLLER)
COMPUTE_DOMAIN_VERBS = ("get", "list", "watch", "create", "delete", "patch")
#: The pod webhook binds a worker to its leader through the worker's StatefulSet, read afresh; it tells whether a
#: leader's template revision was opted in from upstream's ControllerRevisions (watched, and listed afresh).
READS = (
    preflight.Access(group="apps", resource="statefulsets", verbs=("get",)),
    preflight.Access(group="apps", resource="controllerrevisions", verbs=("list", "watch")),
)

# Imported for their registrations on `state.registry`.
__all__ = ["admission", "handlers"]


def main() -> None:
    checks = operator.compute_domain_preflight(COMPUTE_DOMAIN_VERBS, READS)
    sys.exit(operator.run(IDENTITY, state.registry, preflight=checks, watch_selectors=handlers.WATCH_SELECTORS))


if __name__ == "__main__":
    main()
