"""Ownership and cleanup against NVIDIA's real ComputeDomain controller: "The NVIDIA ComputeDomain controller tears
down the IMEX DaemonSet as soon as a ComputeDomain is marked for deletion, so LWS never deletes one while a Pod
references its ResourceClaimTemplate."

kwok removes a deleted pod at once, so on the testbed a pod is seldom seen terminating; here a finalizer keeps one
Terminating (still Running, still holding its claim) as a kubelet's grace period would, and the driver's own
objects (its DaemonSet and claim template) and the teardown witness say whether the domain was torn down under it.
"""

from __future__ import annotations

from mnnvl_runtime import kube
from mnnvl_testbed import dra_driver, manifests, testing

from . import workloads


def driver_objects(api: kube.Kube, ns: str, domain: kube.Object) -> dict[str, bool]:
    """Which of the driver's objects for `domain` exist and are not being deleted."""
    uid = domain["metadata"]["uid"]
    template = api.get(
        "resource.k8s.io/v1",
        "resourceclaimtemplates",
        domain["spec"]["channel"]["resourceClaimTemplate"]["name"],
        namespace=ns,
    )
    daemon_sets = api.list_objects(
        "apps/v1", "daemonsets", namespace=dra_driver.NAMESPACE, labelSelector=f"{manifests.DRIVER_LABEL}={uid}"
    )
    return {
        "claim template": template is not None and not template["metadata"].get("deletionTimestamp"),
        "daemon set": len(daemon_sets) == 1 and not daemon_sets[0]["metadata"].get("deletionTimestamp"),
    }


def test_a_domain_a_terminating_pod_still_uses_keeps_its_imex_daemon_set_until_the_pod_is_gone(
    api: kube.Kube, ns: str
) -> None:
    """LWS never deletes a ComputeDomain while a Pod references its ResourceClaimTemplate, so the driver never
    tears its IMEX DaemonSet down under a running pod: a scaled-down group's domain outlives its terminating
    worker, while the same workload's other obsolete domain goes."""
    workloads.create_lws(api, ns, workloads.lws_manifest("held", replicas=2, size=2))
    running = workloads.wait_groups_running(api, ns, "held", replicas=2, size=2)
    before = workloads.group_domains(running)
    kept, retired = str(before["1"]), str(before["0"])
    worker = kube.path_of("v1", "pods", namespace=ns, name="held-1-1")
    api.patch(worker, {"metadata": {"finalizers": [workloads.HOLD_FINALIZER]}})
    try:
        workloads.patch_lws(api, ns, "held", {"spec": {"replicas": 1}})
        testing.wait_for(
            lambda: api.get("v1", "pods", "held-1", namespace=ns) is None,
            what="group 1's leader gone, its worker still terminating",
            state=testing.state_of(lambda: workloads.summary(api, ns)),
            timeout=workloads.TIMEOUT,
        )
        # Group 0 restarted: mnnvl must now retire group 0's old domain, which nothing uses, in a pass that also
        # sees group 1's domain obsolete but still used by the terminating worker.
        api.request("DELETE", kube.path_of("v1", "pods", namespace=ns, name="held-0"))

        def restarted() -> dict[str, str | None] | None:
            after = workloads.group_domains(workloads.wait_groups_running(api, ns, "held", replicas=1, size=2))
            return after if after["0"] != retired else None

        renewed = str(
            testing.wait_for(restarted, what="group 0 running on a new domain", timeout=workloads.TIMEOUT)["0"]
        )
        found = workloads.wait_domains(api, ns, {renewed, kept})
        [retired_teardown] = [t for t in testing.teardowns(api, ns) if t["domain"] == retired]
        assert retired_teardown["referencing_pods"] == []
        held = api.get("v1", "pods", "held-1-1", namespace=ns)
        assert held is not None
        assert held["metadata"].get("deletionTimestamp")
        assert held["status"]["phase"] == "Running"
        assert not found[kept]["metadata"].get("deletionTimestamp")
        assert driver_objects(api, ns, found[kept]) == {"claim template": True, "daemon set": True}
        assert kept not in {t["domain"] for t in testing.teardowns(api, ns)}
    finally:
        api.patch(worker, {"metadata": {"finalizers": None}})
    workloads.wait_domains(api, ns, {renewed})
    [teardown] = [t for t in testing.teardowns(api, ns) if t["domain"] == kept]
    assert teardown["referencing_pods"] == []
