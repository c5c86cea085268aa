"""`mnnvl-guardian`: the protection finalizer of managed ComputeDomains."""

from __future__ import annotations

import sys

from mnnvl_api import keys
from mnnvl_runtime import identity, operator

from . import admission, handlers, state

IDENTITY = identity.Identity(keys.GUARDIAN_CONTROLLER)
COMPUTE_DOMAIN_VERBS = ("get", "list", "watch", "patch")

# Imported for their registrations on `state.registry`.
__all__ = ["admission", "handlers"]


def main() -> None:
    preflight = operator.compute_domain_preflight(COMPUTE_DOMAIN_VERBS)
    sys.exit(operator.run(IDENTITY, state.registry, preflight=preflight, watch_selectors=handlers.WATCH_SELECTORS))


if __name__ == "__main__":
    main()
