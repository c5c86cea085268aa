"""A worker joins the domain of its current leader incarnation only; names on pods must be derived."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import errors, keys
from mnnvl_lws import rules

from . import build

DOMAIN = "deepseek-r1-0-x7k2b"


def leader(uid: str = "leader-2", *, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    pod = build.pod("deepseek-r1-0", uid=uid, annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: DOMAIN})
    pod["status"] = {"phase": phase}
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    return pod


def statefulset(uid: str = "sts-2", leader_uid: str = "leader-2") -> dict[str, Any]:
    owner = {"kind": "Pod", "name": "deepseek-r1-0", "uid": leader_uid, "controller": True}
    return {"metadata": {"name": "deepseek-r1-0", "uid": uid, "ownerReferences": [owner]}}


def worker(sts_uid: str | None = "sts-2") -> dict[str, Any]:
    pod = build.pod("deepseek-r1-0-1", leader="deepseek-r1-0")
    if sts_uid is not None:
        owner = {"kind": "StatefulSet", "name": "deepseek-r1-0", "uid": sts_uid, "controller": True}
        pod["metadata"]["ownerReferences"] = [owner]
    return pod


def bind(
    worker_: dict[str, Any], leader_: dict[str, Any] | None, statefulset_: dict[str, Any] | None
) -> str | rules.Retry | None:
    return rules.worker_binding(worker_, position(worker_), leader_, statefulset_)


def test_a_worker_of_the_current_leader_joins_its_domain() -> None:
    assert bind(worker(), leader(), statefulset()) == DOMAIN


def test_a_worker_made_by_hand_joins_its_live_leaders_domain() -> None:
    assert bind(worker(sts_uid=None), leader(), None) == DOMAIN


@pytest.mark.parametrize(
    ("worker_", "leader_", "statefulset_", "why"),
    [
        pytest.param(worker(), None, statefulset(), 'leader pod "deepseek-r1-0" not found', id="no-leader"),
        pytest.param(worker(), leader(), None, "gone or was replaced", id="statefulset-gone"),
        pytest.param(worker("sts-1"), leader(), statefulset(), "gone or was replaced", id="old-statefulset"),
        pytest.param(
            worker(), leader(uid="leader-3"), statefulset(), "previous incarnation", id="leader-replaced-since"
        ),
        pytest.param(worker(), leader(phase="Failed"), statefulset(), "finished or being deleted", id="leader-failed"),
        pytest.param(worker(), leader(deleting=True), statefulset(), "finished or being deleted", id="leader-leaving"),
    ],
)
def test_a_worker_is_not_bound_to_a_leader_incarnation_that_is_not_current(
    worker_: dict[str, Any], leader_: dict[str, Any] | None, statefulset_: dict[str, Any] | None, why: str
) -> None:
    binding = bind(worker_, leader_, statefulset_)
    assert isinstance(binding, rules.Retry)
    assert why in binding.message


def position(pod: dict[str, Any]) -> rules.PodPosition:
    found = rules.pod_position(pod)
    assert isinstance(found, rules.PodPosition)
    return found


def test_a_name_recorded_on_a_pod_must_be_derived_for_it() -> None:
    named = build.pod("deepseek-r1-0", annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "NOT A NAME!!"})
    assert [str(e) for e in rules.recorded_name_errors(named, position(named), None)] == [
        str(
            errors.invalid(
                f"metadata.annotations[{keys.COMPUTE_DOMAIN_NAME_ANNOTATION}]",
                "NOT A NAME!!",
                'not a ComputeDomain name of group 0 of LeaderWorkerSet "deepseek-r1"; remove the annotation, it is '
                "set automatically",
            )
        )
    ]
    derived = build.pod("deepseek-r1-0", annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: DOMAIN})
    assert rules.recorded_name_errors(derived, position(derived), None) == []


def test_a_worker_may_only_record_its_leaders_domain() -> None:
    own = build.pod(
        "deepseek-r1-0-1", leader="deepseek-r1-0", annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: DOMAIN}
    )
    assert rules.recorded_name_errors(own, position(own), DOMAIN) == []
    (error,) = rules.recorded_name_errors(own, position(own), "deepseek-r1-0-bbbbb")
    assert 'not the ComputeDomain of leader pod "deepseek-r1-0" (deepseek-r1-0-bbbbb)' in str(error)


def test_a_leader_without_a_claim_steers_its_worker_only_to_a_domain_name_of_the_workers_group() -> None:
    """A CPU-only leader holds no claim: its record is checked as its own admission checked it."""
    edited = leader()
    edited["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION] = "deepseek-r1-1-x7k2b"  # group 1's
    binding = bind(worker(), edited, statefulset())
    assert isinstance(binding, rules.Retry)
    assert binding.message.startswith(
        f'metadata.annotations[{keys.COMPUTE_DOMAIN_NAME_ANNOTATION}] of leader pod "deepseek-r1-0" '
        '(deepseek-r1-1-x7k2b) is not the ComputeDomain mnnvl gave group 0 of LeaderWorkerSet "deepseek-r1"; '
        "it was changed after admission"
    )


def test_a_leader_that_records_nothing_and_holds_no_claim_gives_its_worker_nothing() -> None:
    """It started while the gate was off: its workers run as it does, without the channel, unless their workload
    opted in (the webhook's shell refuses them then: `test_pod_admission.py`)."""
    unmanaged = leader()
    del unmanaged["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION]
    assert bind(worker(), unmanaged, statefulset()) is None


def test_a_leader_made_from_a_template_that_had_not_opted_in_admits_no_worker_that_has() -> None:
    """Upstream LWS v0.10.0 may remake a missing ControllerRevision from the live, opted-in spec under an unstamped
    leader's hash, and build that leader's workers from it. They wait for the leader to be replaced rather than run
    without the channel they were stamped for."""
    unstamped = leader()
    del unstamped["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION]
    del unstamped["metadata"]["labels"][keys.SCOPE_LABEL]
    binding = bind(worker(), unstamped, statefulset())
    assert isinstance(binding, rules.Retry)
    assert binding.message == (
        'leader pod "deepseek-r1-0" was made from a template of LeaderWorkerSet "deepseek-r1" that had not opted in, '
        "this pod from one that has; it is created once the leader is replaced (the leader StatefulSet rolls it to "
        "the current template unless a rollout partition holds it; lower the partition or delete the leader pod to "
        "restart the group)"
    )
