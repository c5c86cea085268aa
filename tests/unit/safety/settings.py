"""Hypothesis settings of the interleaving models.

By default a model, and a property of pure decisions, runs a fixed, derandomized search (the same examples every
run, no example database), so that the guard mutation run (`tox -e guards`) is reproducible and the suite's time is
predictable. Hypothesis derives the seed from the test function's source: editing a property changes its examples,
and the guards run says at once whether a guard's catch was marginal. For a longer random
search, set `MNNVL_SAFETY_PROFILE=long` (20 times the examples, twice the steps, a new seed each run).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

PROFILE_VARIABLE = "MNNVL_SAFETY_PROFILE"


def for_property(*, max_examples: int) -> settings:
    """A property of pure decisions (no steps): the same fixed search as the models, or the long random one."""
    if os.environ.get(PROFILE_VARIABLE) == "long":
        return settings(max_examples=max_examples * 20, deadline=None, database=None)
    return settings(max_examples=max_examples, deadline=None, derandomize=True, database=None)


#: For the properties of pure decisions: they are cheap, so the search is broad.
PURE_SEARCH = for_property(max_examples=1500)
#: For a property narrowed to one rare branch of a pure decision: its worlds hit the branch often, so fewer suffice.
FOCUSED_SEARCH = for_property(max_examples=300)
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
