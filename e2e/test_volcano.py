"""The seed's "LeaderWorkerSet + Volcano" path with the real Volcano v1.15.1 and upstream LWS configured with
`gangSchedulingManagement.schedulerProvider: volcano`, as the seed installs it: LWS makes a PodGroup per group and
Volcano binds a group's pods together or not at all.

Volcano's scheduler and controller manager run only for this module (`volcano.ensure_running`), which also
switches LWS to Volcano gang scheduling and back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, dra_driver, processes, testing, volcano

from . import workloads


@pytest.fixture(scope="module")
def volcano_testbed(testbed: cluster.Testbed) -> Iterator[cluster.Testbed]:
    try:
        volcano.ensure_running(testbed)
        yield testbed
    finally:
        volcano.stop(testbed)


@pytest.fixture(autouse=True)
def nodes_left_by_earlier_tests(volcano_testbed: cluster.Testbed, api: kube.Kube) -> None:
    """Before each test: no pod of an earlier test's namespace (being deleted) still holds a node. Each gang here
    needs whole nodes (one GPU pod per node), and Volcano binds a gang only once all of it fits."""

    def leftovers() -> list[str]:
        going = testing.namespaces_being_deleted(api)
        return [
            f"{pod['metadata']['namespace']}/{pod['metadata']['name']} on {pod['spec']['nodeName']}"
            for pod in api.list_objects("v1", "pods")
            if pod["metadata"]["namespace"] in going and pod["spec"].get("nodeName")
        ]

    testing.wait_for(
        lambda: not leftovers(), what="earlier tests' pods off the nodes", state=leftovers, timeout=workloads.TIMEOUT
    )


def on_volcano(name: str, *, replicas: int = 2, opt_in: str | None = "enabled") -> dict[str, object]:
    """An LWS of groups of two whose pods Volcano schedules (LWS leaves `schedulerName` to the user)."""
    return workloads.lws_manifest(name, replicas=replicas, size=2, opt_in=opt_in, scheduler_name=volcano.SCHEDULER_NAME)


def podgroups(api: kube.Kube, ns: str) -> dict[str, kube.Object]:
    return {
        group["metadata"]["name"]: group for group in api.list_objects(volcano.PODGROUP_API, "podgroups", namespace=ns)
    }


def assert_one_podgroup_per_group(api: kube.Kube, ns: str, pods: list[kube.Object]) -> None:
    """Every pod names its group's PodGroup, which LWS made with minMember = the group's size (2): one per group."""
    named = {p["metadata"]["annotations"][volcano.GROUP_NAME_ANNOTATION] for p in pods}
    groups = {p["metadata"]["labels"][keys.LWS_GROUP_INDEX_LABEL] for p in pods}
    assert len(named) == len(groups)
    found = podgroups(api, ns)
    assert named <= set(found)
    assert {found[name]["spec"]["minMember"] for name in named} == {2}


def test_an_opted_in_lws_on_volcano_stays_gated_until_its_domains_are_ready_then_each_group_binds_whole(
    volcano_testbed: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    """LWS makes one PodGroup per group (minMember = size) and mnnvl gates every pod until the group's domain and
    its claim template exist: Volcano binds nothing meanwhile, then binds each group once it is ungated."""
    supervisor = processes.Supervisor(volcano_testbed.state_dir)
    supervisor.stop(dra_driver.COMPONENT)  # no driver: domains get no claim template, so pods stay gated
    try:
        workloads.create_lws(api, ns, on_volcano("gang"))

        def gated() -> list[kube.Object] | None:
            pods = workloads.lws_pods(api, ns, "gang")
            groups = podgroups(api, ns)
            if len(pods) == 4 and all(workloads.is_gated(p) for p in pods) and len(groups) == 2:
                return pods
            return None

        pods = testing.wait_for(
            gated,
            what="four gated pods and two PodGroups",
            state=testing.state_of(lambda: {**workloads.summary(api, ns), "podgroups": list(podgroups(api, ns))}),
            timeout=workloads.TIMEOUT,
        )
        assert all(p["spec"]["schedulerName"] == volcano.SCHEDULER_NAME for p in pods)
        assert_one_podgroup_per_group(api, ns, pods)
        # Volcano has seen the gangs (it reports their phase) and holds them: none is Running.
        testing.wait_for(
            lambda: all(g.get("status", {}).get("phase") for g in podgroups(api, ns).values()),
            what="Volcano reporting a phase for both PodGroups",
            state=testing.state_of(lambda: {n: g.get("status") for n, g in podgroups(api, ns).items()}),
            timeout=workloads.TIMEOUT,
        )
        assert "Running" not in {g["status"]["phase"] for g in podgroups(api, ns).values()}
    finally:
        cluster.start_driver_part(supervisor, volcano_testbed, dra_driver.COMPONENT)
    running = workloads.wait_groups_running(api, ns, "gang", replicas=2, size=2)
    assert all(workloads.claimed_containers(p) == ["vllm"] for p in running)
    assert len(set(workloads.group_domains(running).values())) == 2
    # Volcano records each gang it has bound as Running.
    testing.wait_for(
        lambda: {g.get("status", {}).get("phase") for g in podgroups(api, ns).values()} == {"Running"},
        what="both PodGroups Running",
        state=testing.state_of(lambda: {n: g.get("status") for n, g in podgroups(api, ns).items()}),
        timeout=workloads.TIMEOUT,
    )
    claims = api.list_objects("resource.k8s.io/v1", "resourceclaims", namespace=ns)
    assert len(claims) == 4
    assert all(c["status"]["allocation"] for c in claims)


def test_a_group_restart_and_a_rolling_update_on_volcano_keep_one_domain_per_group(
    volcano_testbed: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    """A restarted group gets a new domain and a new PodGroup; a rolling update gives every group a new domain;
    each group's pods always share one domain and one PodGroup, and the obsolete domains go once unused."""
    workloads.create_lws(api, ns, on_volcano("roll"))
    before = workloads.group_domains(workloads.wait_groups_running(api, ns, "roll", replicas=2, size=2))
    group_one = {
        g["metadata"]["uid"] for g in podgroups(api, ns).values() if g["metadata"]["name"].startswith("roll-1-")
    }
    workloads.restart_group(api, ns, "roll", 1)
    restarted = workloads.wait_group_restarted(api, ns, "roll", 1, before, replicas=2, size=2)
    assert restarted["0"] == before["0"]
    assert_one_podgroup_per_group(api, ns, workloads.lws_pods(api, ns, "roll"))
    # The restarted group's PodGroup is a new one: the old was owned by the leader pod that went.
    testing.wait_for(
        lambda: not group_one & {g["metadata"]["uid"] for g in podgroups(api, ns).values()},
        what="group 1's old PodGroup gone",
        state=testing.state_of(lambda: {n: g["metadata"]["uid"] for n, g in podgroups(api, ns).items()}),
        timeout=workloads.TIMEOUT,
    )
    workloads.wait_domains(api, ns, {str(domain) for domain in restarted.values()})
    rolled = workloads.roll_worker_image(api, ns, "roll", "nvcr.io/nvidia/vllm:v2", replicas=2, size=2)
    assert set(rolled.values()).isdisjoint(restarted.values())
    assert_one_podgroup_per_group(api, ns, workloads.lws_pods(api, ns, "roll"))
    workloads.wait_domains(api, ns, {str(domain) for domain in rolled.values()})
    retired = {str(domain) for domain in (*before.values(), *restarted.values())} - {str(d) for d in rolled.values()}
    assert retired <= {t["domain"] for t in testing.teardowns(api, ns)}


def test_a_plain_lws_on_volcano_is_untouched(volcano_testbed: cluster.Testbed, api: kube.Kube, ns: str) -> None:
    """An LWS without the annotation gets no domain, claim or gate: Volcano gang-schedules it as it would
    without mnnvl."""
    workloads.create_lws(api, ns, on_volcano("plain", replicas=1, opt_in=None))
    running = workloads.wait_groups_running(api, ns, "plain", replicas=1, size=2)
    assert all("resourceClaims" not in p["spec"] and not p["spec"].get("schedulingGates") for p in running)
    assert all(workloads.domain_of(p) is None for p in running)
    assert workloads.domains(api, ns) == {}
    assert len(podgroups(api, ns)) == 1
