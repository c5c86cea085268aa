from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import domains
from mnnvl_guardian import planner, state

from ..mnnvl_api import domain_builders

Action = planner.Action


@pytest.mark.parametrize(
    ("domain", "in_use", "gate", "expected"),
    [
        pytest.param(
            domain_builders.domain("d", protected=False), False, True, Action.PROTECT, id="managed-unprotected"
        ),
        pytest.param(domain_builders.domain("d"), True, True, Action.NOTHING, id="managed-protected-live"),
        pytest.param(domain_builders.domain("d", deleting=True), True, True, Action.NOTHING, id="deleting-in-use"),
        pytest.param(domain_builders.domain("d", deleting=True), False, True, Action.RELEASE, id="deleting-unused"),
        pytest.param(domain_builders.domain("d", deleting=True), False, False, Action.NOTHING, id="gate-disabled"),
        pytest.param(
            domain_builders.domain("d", deleting=True, protected=False),
            False,
            True,
            Action.NOTHING,
            id="already-released",
        ),
        pytest.param(
            domain_builders.domain("d", deleting=False, protected=False, manager=keys.DS_CONTROLLER),
            False,
            True,
            Action.PROTECT,
            id="slice-domain",
        ),
        pytest.param(
            domain_builders.domain("d", owner_uid=None, manager=None, protected=False, workload_name=None),
            False,
            True,
            Action.NOTHING,
            id="foreign",
        ),
        pytest.param(
            domain_builders.domain("d", owner_uid=None, manager=None, deleting=True, workload_name=None),
            False,
            True,
            Action.NOTHING,
            id="foreign-deleting",
        ),
    ],
)
def test_the_guardian_decides_per_domain(
    domain: domains.DomainFacts, in_use: bool, gate: bool, expected: Action
) -> None:
    assert planner.decide(domain, template_in_use=in_use, gate_enabled=gate) is expected


def test_a_refusal_names_a_few_pods_and_how_to_proceed() -> None:
    message = planner.refusal(domain_builders.domain("dsr1-0-x7k2b"), ["p5", "p1", "p3", "p2", "p4"])
    assert message == (
        "ComputeDomain dsr1-0-x7k2b is in use by pods p1, p2, p3 and 2 more: deleting it now would tear down IMEX "
        'under them (CUDA error 719). Scale down or delete the workload that owns it (workload "deepseek-r1"); '
        "its ComputeDomain is deleted automatically once its pods are gone"
    )


def test_unused_or_foreign_domains_are_not_refused() -> None:
    assert planner.refusal(domain_builders.domain("d"), []) is None
    assert planner.refusal(domain_builders.domain("d", owner_uid=None, manager=None, workload_name=None), ["p"]) is None


def pod(name: str, template: str, phase: str = "Running", uid: str | None = None) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "serving", "uid": uid or f"uid-{name}"},
        "spec": {"resourceClaims": [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": template}]},
        "status": {"phase": phase},
    }


def test_pod_events_point_at_the_domains_whose_use_changed() -> None:
    stores = state.Stores()
    assert stores.domain_mirror.observe(domain_builders.domain_object("d1"), deleted=False) == [("serving", "d1")]
    assert stores.pod_mirror.observe(pod("p", "d1-channel"), deleted=False) == [("serving", "d1")]
    facts = stores.domain(("serving", "d1"))
    assert facts is not None
    assert stores.in_use(facts)
    finished = pod("p", "d1-channel", phase="Succeeded")
    finished["metadata"]["resourceVersion"] = "9"  # type: ignore[index]
    assert stores.pod_mirror.observe(finished, deleted=False) == [("serving", "d1")]
    assert not stores.in_use(facts)


def test_a_cpu_only_pod_that_records_a_domain_keeps_it_in_use() -> None:
    stores = state.Stores()
    stores.domain_mirror.observe(domain_builders.domain_object("d1"), deleted=False)
    leader = {
        "metadata": {
            "name": "cpu-leader",
            "namespace": "serving",
            "uid": "uid-leader",
            "annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "d1"},
        },
        "spec": {"containers": [{"name": "proxy"}]},
        "status": {"phase": "Running"},
    }
    assert stores.pod_mirror.observe(leader, deleted=False) == [("serving", "d1")]
    facts = stores.domain(("serving", "d1"))
    assert facts is not None
    assert stores.in_use(facts)


def test_a_late_deletion_of_an_old_pod_does_not_hide_its_same_named_successor() -> None:
    """kopf orders events per uid only: the old pod's DELETED may be handled after its successor's ADDED."""
    stores = state.Stores()
    stores.domain_mirror.observe(domain_builders.domain_object("d1"), deleted=False)
    facts = stores.domain(("serving", "d1"))
    assert facts is not None
    stores.pod_mirror.observe(pod("p", "d1-channel", uid="new"), deleted=False)
    stores.pod_mirror.observe(pod("p", "d1-channel", uid="old"), deleted=True)
    assert stores.in_use(facts)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda meta: meta.update(labels={}), id="unlabelled"),
        pytest.param(lambda meta: meta.update(managedFields=[]), id="no-recorded-creator"),
        pytest.param(
            lambda meta: meta.update(managedFields=domain_builders.managed_fields("kubectl-label", *meta["labels"])),
            id="relabelled-by-someone-else",
        ),
    ],
)
def test_foreign_domains_are_not_stored(change: Any) -> None:
    stores = state.Stores()
    foreign = domain_builders.domain_object("f")
    change(foreign["metadata"])
    assert stores.domain_mirror.observe(foreign, deleted=False) == []
    assert stores.domain_keys() == []
