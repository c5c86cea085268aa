"""Admission of the LeaderWorkerSets upstream creates per (slice, revision, role): a slice stays unscaled while a
foreign ComputeDomain holds its domain's name, and no new LeaderWorkerSet of an enrolled role is created, nor
one scaled up, while the gate is off. Everything else, scaling down included, is allowed."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from mnnvl_api import errors, keys
from mnnvl_api.decisions import domains
from mnnvl_ds import rules, slice_admission

from ..mnnvl_runtime.memory_api import MemoryApi
from . import build

D0 = build.domain_name(0)
GATE_OFF = (
    'metadata.name: Forbidden: role "prefill" of slice 0 of DisaggregatedSet "llm-serving" is enrolled in slice '
    "ComputeDomains and the AutoComputeDomain feature gate is disabled: a new LeaderWorkerSet would lack the "
    "ComputeDomain channel the slice's others carry; set featureGates.AutoComputeDomain=true (Helm) or "
    "AutoComputeDomain: true (Configuration), or remove disaggregatedset.x-k8s.io/auto-compute-domain from the "
    "DisaggregatedSet"
)


def refusals(
    lws: dict[str, Any],
    old: dict[str, Any] | None = None,
    *,
    gate_enabled: bool = True,
    role_enrolled: bool = True,
    domain: domains.DomainFacts | None = None,
) -> list[str]:
    found = rules.child_errors(lws, old, gate_enabled=gate_enabled, role_enrolled=role_enrolled, domain=domain)
    return [str(error) for error in found]


def scaled(lws: dict[str, Any], replicas: int) -> dict[str, Any]:
    result = copy.deepcopy(lws)
    result["spec"]["replicas"] = replicas
    return result


# --- the pure decision -----------------------------------------------------------------------------------


def test_a_new_child_is_allowed_when_its_domain_is_absent_or_ours() -> None:
    assert refusals(build.child()) == []
    assert refusals(build.child(), domain=build.domain()) == []


@pytest.mark.parametrize(
    "domain",
    [
        pytest.param(build.domain(deleting=True), id="ours-being-deleted"),
        pytest.param(build.domain(condemned=True), id="ours-condemned"),
    ],
)
def test_a_new_child_is_allowed_while_its_own_domain_goes_away(domain: domains.DomainFacts) -> None:
    """The planner makes a new one once it is gone; the pods wait gated meanwhile."""
    assert refusals(build.child(), domain=domain) == []


@pytest.mark.parametrize(
    ("foreign", "owner"),
    [
        pytest.param(build.domain(D0, owner_uid=None, manager=None), "is not managed by mnnvl", id="unmanaged"),
        pytest.param(
            build.domain(D0, owner_uid="previous-incarnation"),
            'is managed by "mnnvl-ds" for owner previous-incarnation',
            id="a-previous-set-of-that-name",
        ),
        pytest.param(
            build.domain(D0, created_by="kubectl"), f'is managed by "mnnvl-ds" for owner {build.UID}', id="forged"
        ),
    ],
)
def test_a_slice_stays_unscaled_while_a_foreign_domain_holds_its_name(foreign: domains.DomainFacts, owner: str) -> None:
    tail = (
        '; it is not adopted and slice 0 of DisaggregatedSet "llm-serving" stays unscaled: delete or rename that '
        "ComputeDomain"
    )
    assert refusals(build.child(), domain=foreign) == [
        f"metadata.name: Forbidden: ComputeDomain {D0} already exists and {owner}{tail}"
    ]
    assert refusals(scaled(build.child(), 2), build.child(), domain=foreign) == [
        f"spec.replicas: Forbidden: ComputeDomain {D0} already exists and {owner}{tail}"
    ]


def test_scaling_down_or_staying_is_always_allowed() -> None:
    foreign = build.domain(D0, owner_uid=None, manager=None)
    running = build.child(replicas=2)
    assert refusals(scaled(running, 1), running, domain=foreign) == []
    assert refusals(running, running, domain=foreign) == []
    assert refusals(scaled(running, 1), running, gate_enabled=False) == []


def test_while_the_gate_is_off_a_new_child_of_an_enrolled_role_is_refused_saying_why() -> None:
    assert refusals(build.child(), gate_enabled=False) == [GATE_OFF]


def test_while_the_gate_is_off_a_child_of_an_enrolled_role_may_not_scale_up() -> None:
    """Its new groups would run without the claim the slice's other pods carry."""
    running = build.child()
    assert refusals(scaled(running, 3), running, gate_enabled=False) == [
        GATE_OFF.replace("metadata.name:", "spec.replicas:").replace(
            "a new LeaderWorkerSet would lack", "new groups of this LeaderWorkerSet would lack"
        )
    ]


def test_once_the_annotation_is_removed_children_scale_up_again_with_the_gate_off() -> None:
    running = build.child()
    assert refusals(scaled(running, 3), running, gate_enabled=False, role_enrolled=False) == []


def test_once_the_annotation_is_removed_new_children_are_created_again_with_the_gate_off() -> None:
    assert refusals(build.child(), gate_enabled=False, role_enrolled=False) == []


@pytest.mark.parametrize(
    "lws",
    [
        pytest.param(build.child(stamped=False), id="opted-out-role"),
        pytest.param(build.child(owned=False), id="not-controlled-by-a-set"),
        pytest.param(build.child(owner_uid="x") | {"metadata": {"name": "x", "labels": {}}}, id="no-set-labels"),
    ],
)
def test_a_leaderworkerset_outside_the_slice_scope_is_never_refused(lws: dict[str, Any]) -> None:
    foreign = build.domain(D0, owner_uid=None, manager=None)
    assert refusals(lws, domain=foreign) == []
    assert refusals(lws, gate_enabled=False) == []


def test_a_leaderworkerset_adopted_from_before_slices_is_slice_0() -> None:
    legacy = build.child(slice_index=None)
    assert rules.child_position(legacy["metadata"]) == rules.Position(
        ds=build.DS, slice=0, revision=build.REVISION, role="prefill"
    )
    foreign = build.domain(D0, owner_uid=None, manager=None)
    assert refusals(legacy, domain=foreign) != []


# --- with the fresh reads it rests on ----------------------------------------------------------------------


def check(api: MemoryApi, lws: dict[str, Any], old: dict[str, Any] | None = None, *, gate_enabled: bool) -> list[str]:
    found: list[errors.FieldError] = asyncio.run(
        slice_admission.child_errors(api.client(keys.DS_CONTROLLER), lws, old, gate_enabled=gate_enabled)
    )
    return [str(error) for error in found]


def test_the_domain_is_read_afresh_and_a_foreign_one_refuses_the_child() -> None:
    api = MemoryApi()
    api.put(keys.COMPUTE_DOMAIN_PLURAL, {"metadata": {"name": D0, "namespace": build.NS}}, manager="kubectl")
    [refusal] = check(api, build.child(), gate_enabled=True)
    assert refusal.startswith(
        f"metadata.name: Forbidden: ComputeDomain {D0} already exists and is not managed by mnnvl;"
    )


@pytest.mark.parametrize(
    ("ds", "expected"),
    [
        pytest.param(build.seed_example(), [GATE_OFF], id="still-enrolled"),
        pytest.param(build.ds(), [], id="annotation-removed"),
        pytest.param(None, [], id="set-gone"),
    ],
)
def test_with_the_gate_off_the_sets_enrollment_is_read_afresh(ds: dict[str, Any] | None, expected: list[str]) -> None:
    api = MemoryApi()
    owner_uid = build.UID
    if ds is not None:
        owner_uid = api.put(keys.DS_PLURAL, ds, manager="kubectl")["metadata"]["uid"]
    assert check(api, build.child(owner_uid=owner_uid), gate_enabled=False) == expected


def test_with_the_gate_off_a_child_of_an_earlier_set_of_that_name_is_not_refused_for_the_new_sets_enrollment() -> None:
    api = MemoryApi()
    api.put(keys.DS_PLURAL, build.seed_example(), manager="kubectl")
    assert check(api, build.child(owner_uid="previous-incarnation"), gate_enabled=False) == []
