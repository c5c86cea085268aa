"""The pod webhook's decision with its fresh reads, on an in-memory API: whose pods it manages."""

from __future__ import annotations

import asyncio
from typing import Any

import jsonpatch
import pytest

from mnnvl_api import keys, names
from mnnvl_api.decisions import injection
from mnnvl_lws import admission, decisions, state

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


def opted_out() -> tuple[MemoryApi, str]:
    """An LWS that opted out (a new, unstamped revision "new" rolls), and its uid; upstream recorded "new"."""
    api = api_with(build.lws())
    uid = str(api.objects[(keys.LWS_PLURAL, "serving", "deepseek-r1")]["metadata"]["uid"])
    api.put("controllerrevisions", build.controller_revision(build.lws(), "new", uid=uid), manager="lws-manager")
    return api, uid


def stamped_revision(revision_hash: str, *, uid: str) -> dict[str, Any]:
    """Upstream's record of a revision made while the LWS was opted in: its templates carry our stamps."""
    lws = build.opted_in()
    patched: dict[str, Any] = jsonpatch.apply_patch(lws, decisions.template_patch(lws, build.ENV_ON))
    return build.controller_revision(patched, revision_hash, uid=uid)


def test_after_opting_out_a_restarted_leader_of_an_opted_in_revision_keeps_its_claim_and_gate() -> None:
    """Upstream recreates a group the rollout has not reached from its old, stamped template."""
    api, uid = opted_out()
    api.put("controllerrevisions", stamped_revision("old", uid=uid), manager="lws-manager")
    admitted = admit(api, state.Stores(), build.pod("deepseek-r1-0", revision="old"))
    assert admitted.domain == names.replica_domain_name("deepseek-r1", 0, "bcdfg")
    assert admitted.gated
    assert admitted.targets == ("vllm",)


@pytest.mark.parametrize(
    ("revision_label", "recorded_for"),
    [
        pytest.param("new", "this-lws", id="of-the-new-unstamped-revision"),
        pytest.param(None, "this-lws", id="without-a-revision-label"),
        pytest.param("old", "uid-of-an-earlier-lws-of-the-same-name", id="stamped-for-an-earlier-lws"),
    ],
)
def test_after_opting_out_a_leader_is_left_alone_unless_upstream_recorded_its_revision_stamped(
    revision_label: str | None, recorded_for: str
) -> None:
    api, uid = opted_out()
    owner = uid if recorded_for == "this-lws" else recorded_for
    api.put("controllerrevisions", stamped_revision("old", uid=owner), manager="lws-manager")
    admitted = admit(api, state.Stores(), build.pod("deepseek-r1-0", revision=revision_label))
    assert (admitted.patch, admitted.errors, admitted.gated) == ([], [], False)
