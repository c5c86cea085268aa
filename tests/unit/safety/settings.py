"""Hypothesis settings of the interleaving models.

By default a model runs a fixed, derandomized search (the same examples every run, no example database), so that
the guard mutation run (`tox -e guards`) is reproducible and the suite's time is predictable. For a longer random
search, set `MNNVL_SAFETY_PROFILE=long` (20 times the examples, twice the steps, a new seed each run).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

PROFILE_VARIABLE = "MNNVL_SAFETY_PROFILE"
#: For the properties of pure decisions: they are cheap, so the search is broad.
PURE_SEARCH = settings(max_examples=1500)
#: For the facts that end a story (gate off, workload gone or deleting, pods ended, domains deleting): true now and
#: then, so that most drawn snapshots have something left to decide.
RARELY = st.sampled_from((False, False, False, True))


def for_model(*, max_examples: int, steps: int) -> settings:
    if os.environ.get(PROFILE_VARIABLE) == "long":
        return settings(
            max_examples=max_examples * 20,
            stateful_step_count=steps * 2,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
    return settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
