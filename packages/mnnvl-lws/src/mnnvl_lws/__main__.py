"""`mnnvl-lws`: the replica-scope ComputeDomain controller."""

from __future__ import annotations

from mnnvl_runtime import scopes

from . import scope


def main() -> None:
    scopes.main(scope.CONTROLLER)


if __name__ == "__main__":
    main()
