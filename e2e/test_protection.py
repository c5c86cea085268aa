"""Protection finalizer: each managed ComputeDomain carries leaderworkerset.sigs.k8s.io/compute-domain-protection,
released only once no Pod references its ResourceClaimTemplate (mnnvl-guardian)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, processes, testing

from . import workloads

GUARDIAN = keys.GUARDIAN_CONTROLLER


@pytest.fixture
def guardian_alone(testbed: cluster.Testbed, lws_replicas: list[controllers.Replica]) -> Iterator[None]:
    """After the test workload runs, the test stops mnnvl-lws, so only the guardian looks after domains."""
    yield
    controllers.start(testbed, GUARDIAN, gate=True)
    controllers.start_lws(testbed, gate=True)


def stop_lws(testbed: cluster.Testbed) -> None:
    """Take mnnvl-lws out while its domains are in use, past the chart's uninstall check (`uninstall.check: false`):
    that check refuses exactly this, and these tests build it on purpose to see the guardian hold on alone."""
    controllers.uninstall(testbed, keys.LWS_CONTROLLER, checked=False)


def guardian_metric(testbed: cluster.Testbed, name: str) -> float:
    [replica] = controllers.running_replicas(testbed, GUARDIAN)
    return workloads.metric(replica, name)


def running_workload(api: kube.Kube, ns: str, name: str) -> str:
    """A one-group LWS running on its domain; returns the domain's name."""
    workloads.create_lws(api, ns, workloads.lws_manifest(name, replicas=1, size=2))
    [domain] = set(workloads.group_domains(workloads.wait_groups_running(api, ns, name, replicas=1, size=2)).values())
    assert domain is not None
    return domain


def domain_path(ns: str, name: str) -> str:
    return kube.path_of(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name=name)


def held_by_protection(api: kube.Kube, ns: str, name: str) -> kube.Object:
    """Wait until the domain is Terminating with only the protection finalizer left (the driver has let go)."""
    return testing.wait_for(
        lambda: (
            (d := api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, name, namespace=ns))
            and d["metadata"].get("deletionTimestamp")
            and d["metadata"].get("finalizers") == [keys.PROTECTION_FINALIZER]
            and d
        ),
        what=f"{name} Terminating, held by the protection finalizer",
        state=testing.state_of(lambda: workloads.summary(api, ns)),
        timeout=30,
    )


def delete_and_see_it_kept(api: kube.Kube, ns: str, testbed: cluster.Testbed, domain: str) -> None:
    """Delete the domain directly and wait until the guardian has seen the deletion and kept the finalizer."""
    api.request("DELETE", domain_path(ns, domain))
    held_by_protection(api, ns, domain)
    testing.wait_for(
        lambda: guardian_metric(testbed, "mnnvl_protected_domains_terminating") == 1.0,
        what="the guardian to have seen the deletion and kept the domain",
        timeout=30,
    )
    assert api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, domain, namespace=ns) is not None


def wait_gone(api: kube.Kube, ns: str, name: str, what: str) -> None:
    testing.wait_for(
        lambda: api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, name, namespace=ns) is None, what=what, timeout=60
    )


def delete_workload(api: kube.Kube, ns: str, name: str) -> None:
    """Delete the LeaderWorkerSet and wait for its pods to be gone."""
    api.request("DELETE", workloads.lws_path(ns, name))
    testing.wait_for(lambda: testing.pods(api, ns) == [], what="the workload's pods gone", timeout=60)


def gone_only_after_its_pods(api: kube.Kube, ns: str, name: str) -> None:
    """Wait for the domain to disappear, failing at once if it disappears while a pod still exists."""

    def gone() -> bool:
        pods = testing.pods(api, ns)
        present = api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, name, namespace=ns) is not None
        assert present or not pods, f"{name} was released while pods still existed: {testing.placement(pods)}"
        return not present

    testing.wait_for(
        gone, what=f"{name} gone after its pods", state=testing.state_of(lambda: workloads.summary(api, ns)), timeout=90
    )


@pytest.mark.in_use_teardown_expected
def test_a_directly_deleted_domain_stays_terminating_until_its_pods_are_gone(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, guardian_alone: None
) -> None:
    """When a ComputeDomain is deleted directly, LWS removes the finalizer only once no Pod references its ResourceClaimTemplate."""
    domain = running_workload(api, ns, "direct")
    stop_lws(testbed)
    delete_and_see_it_kept(api, ns, testbed, domain)
    api.request("DELETE", workloads.lws_path(ns, "direct"))
    gone_only_after_its_pods(api, ns, domain)


def test_a_foreign_domain_is_never_touched(api: kube.Kube, ns: str) -> None:
    """The guardian never adds or removes the protection finalizer on a ComputeDomain mnnvl does not manage."""
    name = "lookalike-0-x7k2b"
    workloads.create_foreign_domain(api, ns, name, {keys.WORKLOAD_NAME_LABEL: "lookalike"})
    seen = testing.wait_for(
        lambda: (
            d
            if (d := api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, name, namespace=ns))
            and "resource.nvidia.com/computeDomain" in d["metadata"].get("finalizers", [])
            else None
        ),
        what="the driver to pick the domain up",
        timeout=30,
    )
    assert keys.PROTECTION_FINALIZER not in seen["metadata"]["finalizers"]
    api.request("DELETE", domain_path(ns, name))
    wait_gone(api, ns, name, "the foreign domain deleted without delay")


def test_a_domain_deleted_while_the_gate_is_disabled_stays_terminating(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, guardian_alone: None
) -> None:
    """A ComputeDomain that is deleted while the gate is disabled stays in Terminating until the leaderworkerset.sigs.k8s.io/compute-domain-protection finalizer is removed by re-enabling the gate or by hand, after its Pods are gone."""
    domain = running_workload(api, ns, "paused")
    stop_lws(testbed)
    delete_workload(api, ns, "paused")
    controllers.start(testbed, GUARDIAN, gate=False)
    delete_and_see_it_kept(api, ns, testbed, domain)
    controllers.start(testbed, GUARDIAN, gate=True)
    wait_gone(api, ns, domain, "the domain released once the gate is back on")


@pytest.mark.image_run
def test_deny_mode_refuses_to_delete_an_in_use_domain_naming_its_pods(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, guardian_alone: None
) -> None:
    """In Deny mode the deletion of an in-use managed domain is refused, naming its pods, so the driver never tears it down."""
    controllers.start(testbed, GUARDIAN, gate=True, extra_config={"computeDomain": {"deletionProtection": "Deny"}})
    domain = running_workload(api, ns, "denied")
    stop_lws(testbed)
    message = workloads.rejection(lambda: api.request("DELETE", domain_path(ns, domain)))
    assert (
        f"ComputeDomain {domain} is in use by pods denied-0, denied-0-1: deleting it now would tear down IMEX"
        in message
    )
    assert 'Scale down or delete the workload that owns it (workload "denied")' in message
    assert api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, domain, namespace=ns) is not None
    assert guardian_metric(testbed, "mnnvl_domain_deletions_refused_total") >= 1
    delete_workload(api, ns, "denied")
    api.request("DELETE", domain_path(ns, domain))
    wait_gone(api, ns, domain, "the unused domain deleted")
    assert workloads.in_use_teardowns(api, ns) == []


def test_deny_mode_names_a_pod_stuck_terminating_and_the_command_that_lets_it_go(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, guardian_alone: None
) -> None:
    """A pod that cannot finish terminating (a finalizer plays the lost node's kubelet) and is past its grace period
    keeps its domain's deletion refused in Deny mode; the refusal names it as stuck with the force-delete command,
    not as a workload to scale down. Once the pod is gone, the deletion is allowed."""
    controllers.start(testbed, GUARDIAN, gate=True, extra_config={"computeDomain": {"deletionProtection": "Deny"}})
    domain = running_workload(api, ns, "held")
    stop_lws(testbed)
    with workloads.deleted_but_one_worker(api, ns, "held", "held-0-1", timeout=60) as worker:
        # No grace period left: the deletionTimestamp is now, and the pod stays only for its finalizer.
        api.request("DELETE", worker, body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        message = workloads.rejection(lambda: api.request("DELETE", domain_path(ns, domain)))
        assert f"ComputeDomain {domain} is held by 1 pod(s) stuck Terminating" in message, message
        assert f"force-delete them: kubectl delete pod -n {ns} --force --grace-period=0 held-0-1;" in message
        assert "Scale down" not in message
        assert api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, domain, namespace=ns) is not None
    testing.wait_for(lambda: testing.pods(api, ns) == [], what="the held worker gone", timeout=60)
    api.request("DELETE", domain_path(ns, domain))
    wait_gone(api, ns, domain, "the unused domain deleted")


@pytest.mark.in_use_teardown_expected
def test_a_guardian_killed_and_restarted_midway_loses_nothing(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, guardian_alone: None
) -> None:
    """A guardian killed mid-way releases nothing early and still releases the domain once it is back."""
    domain = running_workload(api, ns, "crash")
    stop_lws(testbed)
    delete_and_see_it_kept(api, ns, testbed, domain)
    [replica] = controllers.running_replicas(testbed, GUARDIAN)
    pid = processes.Supervisor(testbed.state_dir).pid(replica.name)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    delete_workload(api, ns, "crash")
    assert held_by_protection(api, ns, domain)["metadata"]["finalizers"] == [keys.PROTECTION_FINALIZER]
    controllers.start(testbed, GUARDIAN, gate=True)
    wait_gone(api, ns, domain, "the domain released by the restarted guardian")
