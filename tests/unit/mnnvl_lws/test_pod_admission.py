"""The pod webhook's decision with its fresh reads, on an in-memory API: whose pods it manages."""

from __future__ import annotations

import asyncio
from typing import Any

from mnnvl_api import keys, names
from mnnvl_api.decisions import injection
from mnnvl_lws import admission, state

from ..safety.memory_api import MemoryApi
from . import build


def admit(api: MemoryApi, stores: state.Stores, pod: dict[str, Any]) -> injection.PodAdmission:
    return asyncio.run(admission.admit_pod(api.client(keys.LWS_CONTROLLER), stores, pod, token="bcdfg"))


def api_with(lws: dict[str, Any]) -> MemoryApi:
    api = MemoryApi()
    api.put(keys.LWS_PLURAL, {"metadata": {**lws["metadata"]}}, manager="kubectl")
    return api


def test_a_leader_of_a_workload_that_did_not_opt_in_is_left_alone() -> None:
    """Its pods may carry the scope label (a stale revision, or a hand-made pod), but nothing would ungate it."""
    admitted = admit(api_with(build.lws()), state.Stores(), build.pod("deepseek-r1-0"))
    assert (admitted.patch, admitted.errors, admitted.gated) == ([], [], False)


def test_a_leader_of_an_opted_in_workload_gets_a_fresh_domain_and_the_gate_even_before_the_stores_know_it() -> None:
    admitted = admit(api_with(build.opted_in()), state.Stores(), build.pod("deepseek-r1-0"))
    assert admitted.domain == names.replica_domain_name("deepseek-r1", 0, "bcdfg")
    assert admitted.gated
    assert admitted.targets == ("vllm",)
