"""`mnnvl-ds`: the slice-scope ComputeDomain controller."""

from __future__ import annotations

import sys

from mnnvl_api import keys
from mnnvl_runtime import identity, operator, preflight

from . import admission, handlers, state

IDENTITY = identity.Identity(keys.DS_CONTROLLER)
COMPUTE_DOMAIN_VERBS = ("get", "list", "watch", "create", "delete", "patch")
#: The webhooks read a pod's LeaderWorkerSet and its DisaggregatedSet afresh when the stores do not know them.
READS = (
    preflight.Access(group=keys.DS_GROUP, resource=keys.DS_PLURAL, verbs=("get",)),
    preflight.Access(group=keys.LWS_GROUP, resource=keys.LWS_PLURAL, verbs=("get",)),
)

# Imported for their registrations on `state.registry`.
__all__ = ["admission", "handlers"]


def main() -> None:
    checks = operator.compute_domain_preflight(COMPUTE_DOMAIN_VERBS, READS)
    sys.exit(operator.run(IDENTITY, state.registry, preflight=checks, watch_selectors=handlers.WATCH_SELECTORS))


if __name__ == "__main__":
    main()
