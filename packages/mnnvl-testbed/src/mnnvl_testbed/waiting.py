"""Polling for a condition with a deadline; on timeout, the failure shows the state last seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeoutError(AssertionError):
    """The condition did not hold in time. Subclasses AssertionError so pytest reports it as a test failure."""


def wait_for(
    condition: Callable[[], T | None],
    *,
    what: str,
    timeout: float = 60.0,
    interval: float = 0.25,
    state: Callable[[], object] | None = None,
) -> T:
    """Call `condition` until it returns something truthy, and return that.

    On timeout, raise with `what` was awaited and `state()` (the objects as they were last seen).
    Exceptions from `condition` propagate: a condition that cannot be evaluated is a bug, not a wait.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            seen = state() if state is not None else "(no state captured)"
            raise WaitTimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; last seen:\n{seen}")
        time.sleep(interval)
