"""Safety mechanics: a domain in use is never deleted, whatever crashes; identity, not labels, decides what is ours;
pods bind only to domains their workload derives, and only to the current incarnation of their leader."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, processes, release, testing

from . import workloads

ROUTER = {"name": "router", "image": "nvcr.io/nvidia/dynamo:latest", "resources": {"limits": {"cpu": "1"}}}
TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_path(ns: str, name: str) -> str:
    return kube.path_of("v1", "pods", namespace=ns, name=name)


def domain_path(ns: str, name: str) -> str:
    return kube.path_of(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name=name)


def get_domain(api: kube.Kube, ns: str, name: str) -> kube.Object | None:
    return api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, name, namespace=ns)


# --- watching for a domain deleted under a pod ---------------------------------------------------------------


def users(domain: kube.Object, pods: list[kube.Object]) -> list[str]:
    """The non-terminal pods that hold the domain's channel claim or record the domain (a CPU-only leader)."""
    name = domain["metadata"]["name"]
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    return [
        p["metadata"]["name"]
        for p in pods
        if p.get("status", {}).get("phase") not in TERMINAL_PHASES
        and (
            workloads.domain_of(p) == name
            or any(c.get("resourceClaimTemplateName") == template for c in p["spec"].get("resourceClaims") or [])
        )
    ]


class InUseDeletions:
    """Polls a namespace from a thread and records every ComputeDomain seen being deleted while a pod uses it.

    The teardown witness judges only once the driver acts, a watch event late; this poller sees the deletion
    itself, CPU-only leaders (which record their domain without holding its claim) included. Domains are listed
    before pods: a pod admitted onto a domain after its deletion began would itself be a failure, and the
    protection finalizer keeps a domain deleted in use visible (Terminating) until its pods are gone.
    """

    def __init__(self, api: kube.Kube, ns: str) -> None:
        self.api = api
        self.ns = ns
        self.found: list[tuple[str, list[str]]] = []
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"in-use-deletions-{ns}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # an unreadable moment is retried at the next poll
                deleting = [
                    d for d in workloads.domains(self.api, self.ns).values() if d["metadata"].get("deletionTimestamp")
                ]
                if deleting:
                    pods = testing.pods(self.api, self.ns)
                    for domain in deleting:
                        found = (domain["metadata"]["name"], users(domain, pods))
                        if found[1] and found not in self.found:
                            self.found.append(found)
                self.polls += 1
            self._stop.wait(0.1)

    @contextlib.contextmanager
    def running(self) -> Iterator[InUseDeletions]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=10)


# --- 1. mnnvl-lws killed during a group restart ------------------------------------------------------------

KILL_MOMENTS = ("right_after_the_leader_is_deleted", "once_the_new_leader_exists", "while_the_old_domain_is_condemned")


def kill_lws(testbed: cluster.Testbed) -> None:
    """SIGKILL the one mnnvl-lws replica, which this test session started (never anyone else's process)."""
    supervisor = processes.Supervisor(testbed.state_dir)
    [replica] = controllers.running_replicas(testbed)
    pid = supervisor.owned_pid(replica.name)
    assert pid is not None, f"{replica.name} is not running"
    parent = int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    assert parent == os.getpid(), f"{replica.name} (pid {pid}) was not started by this test session; not killing it"
    assert supervisor.kill(replica.name) == pid
    assert not supervisor.alive(replica.name)


@pytest.mark.parametrize("moment", KILL_MOMENTS)
def test_mnnvl_lws_killed_during_a_group_restart_never_deletes_a_domain_a_pod_still_uses(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, lws_replicas: list[controllers.Replica], moment: str
) -> None:
    """mnnvl-lws killed at any moment of a group restart never deletes a ComputeDomain a Pod still uses, and the group runs again on a new one."""
    manifest = workloads.lws_manifest("crash", replicas=1, size=2, leader_containers=[ROUTER])
    manifest["spec"]["startupPolicy"] = "LeaderReady"
    workloads.create_lws(api, ns, manifest)
    pods = {p["metadata"]["name"]: p for p in workloads.wait_groups_running(api, ns, "crash", replicas=1, size=2)}
    leader = pods["crash-0"]
    old = workloads.domain_of(leader)
    assert old is not None
    # The leader records its domain but holds no claim: only the recorded name keeps the domain in use.
    assert "resourceClaims" not in leader["spec"]
    assert workloads.claimed_containers(pods["crash-0-1"]) == ["vllm"]

    with InUseDeletions(testbed.api(), ns).running() as watch:
        api.request("DELETE", pod_path(ns, "crash-0"))
        if moment == "once_the_new_leader_exists":
            testing.wait_for(
                lambda: (
                    (p := api.get("v1", "pods", "crash-0", namespace=ns))
                    and p["metadata"]["uid"] != leader["metadata"]["uid"]
                ),
                what="the new leader pod",
                interval=0.02,
                timeout=60,
            )
        elif moment == "while_the_old_domain_is_condemned":
            testing.wait_for(
                lambda: (
                    keys.CONDEMNED_ANNOTATION
                    in ((get_domain(api, ns, old) or {"metadata": {}})["metadata"].get("annotations") or {})
                ),
                what=f"{old} condemned",
                state=testing.state_of(lambda: workloads.summary(api, ns)),
                interval=0.02,
                timeout=60,
            )
        kill_lws(testbed)
        controllers.start_lws(testbed, gate=True)

        def restarted() -> dict[str, str | None] | None:
            after = workloads.group_domains(workloads.wait_groups_running(api, ns, "crash", replicas=1, size=2))
            return after if after["0"] != old else None

        new = testing.wait_for(restarted, what="the group running on a new domain", timeout=workloads.TIMEOUT)["0"]
        assert new is not None
        workloads.wait_domains(api, ns, {new})
    assert watch.polls > 0
    assert watch.found == []
    teardowns = testing.teardowns(api, ns)
    assert [t["referencing_pods"] for t in teardowns if t["domain"] == old] == [[]]
    assert new not in {t["domain"] for t in teardowns}
    assert workloads.in_use_teardowns(api, ns) == []


# --- 2. a foreign domain relabelled as ours ----------------------------------------------------------------


def relabelled_as_ours(api: kube.Kube, ns: str, name: str, lws: kube.Object) -> kube.Object:
    """A foreign ComputeDomain named like the domain of group 0 of `lws`, then given, by this test's own field
    manager, exactly the labels mnnvl-lws puts on that domain."""
    workloads.create_foreign_domain(api, ns, name, {})
    testing.wait_for(
        lambda: (
            "resource.nvidia.com/computeDomain"
            in (get_domain(api, ns, name) or {"metadata": {}})["metadata"].get("finalizers", [])
        ),
        what=f"the driver to pick {name} up",
        timeout=30,
    )
    labels = {
        keys.OWNER_UID_LABEL: lws["metadata"]["uid"],
        keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER,
        keys.SCOPE_LABEL: keys.SCOPE_REPLICA,
        keys.WORKLOAD_NAME_LABEL: lws["metadata"]["name"],
        keys.GROUP_INDEX_LABEL: "0",
    }
    relabelled = api.patch(domain_path(ns, name), {"metadata": {"labels": labels}})
    assert relabelled["metadata"]["labels"] == labels
    owners = {
        entry["manager"]
        for entry in relabelled["metadata"]["managedFields"]
        if f"f:{keys.OWNER_UID_LABEL}" in entry.get("fieldsV1", {}).get("f:metadata", {}).get("f:labels", {})
    }
    assert owners == {cluster.FIELD_MANAGER}, "the identity labels must be owned by the test, not by mnnvl-lws"
    return relabelled


def running_victim(api: kube.Kube, ns: str) -> tuple[kube.Object, str]:
    """An opted-in one-group LWS running on its domain: the LWS and the domain's name."""
    lws = workloads.create_lws(api, ns, workloads.lws_manifest("victim", replicas=1, size=2))
    [domain] = set(
        workloads.group_domains(workloads.wait_groups_running(api, ns, "victim", replicas=1, size=2)).values()
    )
    assert domain is not None
    return lws, domain


def untouched_by_mnnvl_lws(domain: kube.Object | None) -> bool:
    """The relabelled domain has not been condemned (nor had its protection changed): checked at every poll."""
    assert domain is not None
    annotations = domain["metadata"].get("annotations") or {}
    assert keys.CONDEMNED_ANNOTATION not in annotations, f"{domain['metadata']['name']} was condemned"
    return True


def delete_victim_and_see_its_domain_deleted(api: kube.Kube, ns: str, real: str, foreign: str) -> None:
    """Delete the LWS and wait until mnnvl-lws has deleted its real domain (a sign it processed every domain
    labelled for that workload), checking all along that the relabelled one is never condemned."""
    api.request("DELETE", workloads.lws_path(ns, "victim"))
    testing.wait_for(
        lambda: untouched_by_mnnvl_lws(get_domain(api, ns, foreign)) and get_domain(api, ns, real) is None,
        what=f"{real} deleted once the LWS is gone",
        state=testing.state_of(lambda: workloads.summary(api, ns)),
        interval=0.1,
        timeout=workloads.TIMEOUT,
    )


def as_mnnvl_ds(testbed: cluster.Testbed, api: kube.Kube) -> kube.Kube:
    """A client writing as mnnvl-ds: as its own ServiceAccount while mnnvl-ds is installed (its identity webhook
    refuses a write as its field manager by anyone else), else as the admin."""
    if release.BLOCKS[keys.DS_CONTROLLER] not in release.installed_blocks(testbed):
        return kube.Kube(api.api, field_manager=keys.DS_CONTROLLER)
    kubeconfig = release.service_account_kubeconfig(testbed, release.rendered(testbed), keys.DS_CONTROLLER)
    return kube.Kube(kube.load_api_client(kubeconfig), field_manager=keys.DS_CONTROLLER)


def guardian_caught_up(testbed: cluster.Testbed, api: kube.Kube, ns: str) -> None:
    """A positive sign that the guardian has handled every ComputeDomain event before now: a probe domain made
    now, with the identity of an mnnvl scope controller (mnnvl-ds, whose workload it names does not exist), gets
    the protection finalizer from the guardian and, once deleted, is released by it."""
    name = f"guardian-probe-{uuid.uuid4().hex[:5]}"
    probe = workloads.domain_labelled_as(ns, name, keys.DS_CONTROLLER)
    probe["metadata"]["labels"][keys.WORKLOAD_NAME_LABEL] = "guardian-probe"
    as_mnnvl_ds(testbed, api).create(probe, keys.COMPUTE_DOMAIN_PLURAL)
    testing.wait_for(
        lambda: (
            keys.PROTECTION_FINALIZER
            in (get_domain(api, ns, name) or {"metadata": {}})["metadata"].get("finalizers", [])
        ),
        what=f"the guardian to protect the probe domain {name}",
        timeout=60,
    )
    api.request("DELETE", domain_path(ns, name))
    testing.wait_for(
        lambda: get_domain(api, ns, name) is None, what=f"the guardian to release the probe domain {name}", timeout=60
    )


def test_a_foreign_domain_relabelled_as_ours_is_never_deleted_condemned_or_protected(
    testbed: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    """A foreign ComputeDomain relabelled with mnnvl's labels is never deleted, condemned or protected."""
    lws, real = running_victim(api, ns)
    foreign = "victim-0-bbbbb"
    labelled = relabelled_as_ours(api, ns, foreign, lws)
    delete_victim_and_see_its_domain_deleted(api, ns, real, foreign)
    guardian_caught_up(testbed, api, ns)
    after = get_domain(api, ns, foreign)
    assert after is not None
    assert untouched_by_mnnvl_lws(after)
    assert not after["metadata"].get("deletionTimestamp")
    assert keys.PROTECTION_FINALIZER not in after["metadata"].get("finalizers", [])
    assert after["metadata"]["labels"] == labelled["metadata"]["labels"]
    assert set(workloads.domains(api, ns)) == {foreign}


def test_a_foreign_domain_relabelled_as_ours_and_deleted_is_never_released(
    testbed: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    """A foreign ComputeDomain relabelled with mnnvl's labels, carrying the protection finalizer and deleted, is never released by mnnvl."""
    lws, real = running_victim(api, ns)
    foreign = "victim-0-ccccc"
    relabelled_as_ours(api, ns, foreign, lws)

    def add_protection(current: kube.Object) -> kube.JsonPatch:
        meta = current["metadata"]
        return [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            {"op": "add", "path": "/metadata/finalizers", "value": [*meta["finalizers"], keys.PROTECTION_FINALIZER]},
        ]

    api.modify(domain_path(ns, foreign), add_protection)
    try:
        api.request("DELETE", domain_path(ns, foreign))
        testing.wait_for(
            lambda: (
                (get_domain(api, ns, foreign) or {"metadata": {}})["metadata"].get("finalizers")
                == [keys.PROTECTION_FINALIZER]
            ),
            what=f"{foreign} Terminating, only the protection finalizer left (the driver has let go)",
            timeout=30,
        )
        delete_victim_and_see_its_domain_deleted(api, ns, real, foreign)
        guardian_caught_up(testbed, api, ns)
        after = get_domain(api, ns, foreign)
        assert after is not None
        assert after["metadata"].get("deletionTimestamp")
        assert after["metadata"]["finalizers"] == [keys.PROTECTION_FINALIZER]
    finally:
        api.modify(
            domain_path(ns, foreign),
            lambda current: [
                {"op": "test", "path": "/metadata/finalizers", "value": current["metadata"].get("finalizers")},
                {
                    "op": "replace",
                    "path": "/metadata/finalizers",
                    "value": [f for f in current["metadata"].get("finalizers") or [] if f != keys.PROTECTION_FINALIZER],
                },
            ],
        )
    testing.wait_for(lambda: get_domain(api, ns, foreign) is None, what=f"{foreign} gone once released", timeout=30)


# --- 3. and 4. pods made by hand ---------------------------------------------------------------------------


#: Upstream LWS's pod webhook needs these on any pod labelled with an LWS name: the group size, and which pod of the
#: group it is (worker index 0: a leader; a worker's index is taken from its name, its group from this label).
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"


def hand_made_pod(
    name: str,
    lws: str,
    *,
    size: int = 1,
    leader: str | None = None,
    annotations: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> kube.Object:
    """A pod made by hand, labelled as a replica-scope pod of `lws` (its leader, or a worker of `leader`), with a
    GPU container, and with a controller `owner` so that no StatefulSet of the LWS adopts (and deletes) it."""
    labels = {keys.LWS_NAME_LABEL: lws, keys.SCOPE_LABEL: keys.SCOPE_REPLICA}
    notes = {LWS_SIZE_ANNOTATION: str(size), **(annotations or {})}
    if leader is None:
        labels[keys.LWS_WORKER_INDEX_LABEL] = "0"
    else:
        labels[keys.LWS_GROUP_INDEX_LABEL] = leader.rsplit("-", 1)[1]
        notes[keys.LWS_LEADER_NAME_ANNOTATION] = leader
    meta: dict[str, Any] = {"name": name, "labels": labels, "annotations": notes}
    if owner is not None:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [dict(workloads.VLLM)]}}


def config_map_owner(api: kube.Kube, ns: str) -> dict[str, Any]:
    """An owner for hand-made pods: a ConfigMap of the test's own."""
    made = api.request(
        "POST",
        kube.path_of("v1", "configmaps", namespace=ns),
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hand-made-pods"}},
    )
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": "hand-made-pods", "uid": made["metadata"]["uid"]}


def create_pod(api: kube.Kube, ns: str, pod: kube.Object) -> kube.Object:
    return api.request("POST", kube.path_of("v1", "pods", namespace=ns), body=pod)


def admission_refusal(call: Any) -> tuple[int, str]:
    """The status and message of the admission error `call` must meet."""
    with pytest.raises(kube.ApiError) as refused:
        call()
    message: str = json.loads(refused.value.body or "{}").get("message", "")
    return refused.value.status, message


def test_a_pod_that_names_a_domain_its_workload_does_not_derive_is_refused(api: kube.Kube, ns: str) -> None:
    """A Pod that names a ComputeDomain its workload does not derive is refused at admission."""
    workloads.create_lws(api, ns, workloads.lws_manifest("named", replicas=1, size=1))
    [domain] = set(
        workloads.group_domains(workloads.wait_groups_running(api, ns, "named", replicas=1, size=1)).values()
    )
    forged = hand_made_pod(
        "named-5",
        "named",
        annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "NOT A NAME!!"},
        owner=config_map_owner(api, ns),
    )
    status, message = admission_refusal(lambda: create_pod(api, ns, forged))
    assert status == 422, message
    assert (
        f'metadata.annotations[{keys.COMPUTE_DOMAIN_NAME_ANNOTATION}]: Invalid value: "NOT A NAME!!": '
        'not a ComputeDomain name of group 5 of LeaderWorkerSet "named"; remove the annotation, it is set automatically'
    ) in message
    assert api.get("v1", "pods", "named-5", namespace=ns) is None
    assert set(workloads.domains(api, ns)) == {domain}


def test_only_opted_in_leaderworkersets_get_domains(
    api: kube.Kube, ns: str, lws_replicas: list[controllers.Replica]
) -> None:
    """Only opted-in LeaderWorkerSets get ComputeDomains, whatever labels a Pod carries."""
    workloads.create_lws(api, ns, workloads.lws_manifest("plain", replicas=0, size=1, opt_in=None))
    admitted = workloads.admissions(lws_replicas[0])
    pod = create_pod(api, ns, hand_made_pod("plain-0", "plain", owner=config_map_owner(api, ns)))
    assert workloads.admissions(lws_replicas[0]) > admitted
    # The pod of a workload that did not opt in is left alone: no domain recorded, no claim, no gate.
    assert workloads.domain_of(pod) is None, testing.dump(pod)
    assert workloads.claimed_containers(pod) == []
    assert not workloads.is_gated(pod)
    # A positive sign that mnnvl-lws has reconciled since the pod appeared: an opted-in LWS made afterwards in the
    # same namespace gets its domain (its pods and domain events come after the hand-made pod's).
    workloads.create_lws(api, ns, workloads.lws_manifest("opted", replicas=1, size=1))
    [domain] = set(
        workloads.group_domains(workloads.wait_groups_running(api, ns, "opted", replicas=1, size=1)).values()
    )
    assert domain is not None
    assert set(workloads.domains(api, ns)) == {domain}, workloads.summary(api, ns)


# --- 5. a worker of a replaced leader ------------------------------------------------------------------------


def test_a_worker_of_a_replaced_leader_is_not_bound_to_the_old_domain(api: kube.Kube, ns: str) -> None:
    """A worker whose leader was replaced is not bound to the old leader's ComputeDomain."""
    workloads.create_lws(api, ns, workloads.lws_manifest("moved", replicas=1, size=2))
    pods = {p["metadata"]["name"]: p for p in workloads.wait_groups_running(api, ns, "moved", replicas=1, size=2)}
    old = workloads.domain_of(pods["moved-0"])
    old_statefulset = api.request("GET", kube.path_of("apps/v1", "statefulsets", namespace=ns, name="moved-0"))
    api.request("DELETE", pod_path(ns, "moved-0"))

    def restarted() -> dict[str, str | None] | None:
        after = workloads.group_domains(workloads.wait_groups_running(api, ns, "moved", replicas=1, size=2))
        return after if after["0"] != old else None

    new = testing.wait_for(restarted, what="the group running on a new domain", timeout=workloads.TIMEOUT)["0"]
    current = api.request("GET", kube.path_of("apps/v1", "statefulsets", namespace=ns, name="moved-0"))
    assert current["metadata"]["uid"] != old_statefulset["metadata"]["uid"]
    # A worker of the previous incarnation, as its StatefulSet would have created it had it been a moment late.
    stale = hand_made_pod(
        "moved-0-7",
        "moved",
        size=2,
        leader="moved-0",
        owner={
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": "moved-0",
            "uid": old_statefulset["metadata"]["uid"],
        },
    )
    status, message = admission_refusal(lambda: create_pod(api, ns, stale))
    assert status == 409, message
    assert 'StatefulSet "moved-0" of this pod is gone or was replaced' in message
    assert "the pod is created again by its controller" in message
    assert api.get("v1", "pods", "moved-0-7", namespace=ns) is None
    workloads.wait_domains(api, ns, {str(new)})


# --- mnnvl-ds killed during a rollout ---------------------------------------------------------------------------


def kill_ds(testbed: cluster.Testbed) -> None:
    """SIGKILL the one mnnvl-ds replica, which this test session started (never anyone else's process)."""
    supervisor = processes.Supervisor(testbed.state_dir)
    [replica] = controllers.running_replicas(testbed, keys.DS_CONTROLLER)
    pid = supervisor.owned_pid(replica.name)
    assert pid is not None, f"{replica.name} is not running"
    parent = int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    assert parent == os.getpid(), f"{replica.name} (pid {pid}) was not started by this test session; not killing it"
    assert supervisor.kill(replica.name) == pid
    assert not supervisor.alive(replica.name)


def test_mnnvl_ds_killed_during_a_rollout_never_deletes_a_domain_a_pod_still_uses(
    api: kube.Kube, ns: str, testbed: cluster.Testbed
) -> None:
    """mnnvl-ds killed mid-rollout, as it condemns the old revision's domain, never deletes a ComputeDomain a Pod still uses, and the set converges on the new revision's domain once it is back."""
    workloads.create_ds(api, ns, workloads.ds_manifest("crash", slices=1))
    [before] = workloads.wait_slices_running(api, ns, "crash", pods_per_slice={0: 3}).values()
    old = workloads.slice_domain("crash", 0, workloads.revision_of(before[0]))

    with InUseDeletions(testbed.api(), ns).running() as watch:
        workloads.set_role_image(api, ns, "crash", 0, "nvcr.io/nvidia/vllm:2")
        # Killed as the old revision's domain is about to be deleted (condemned, its pods gone or going). While
        # mnnvl-ds is down its LeaderWorkerSet webhook fails closed, so the kill comes once the new revision's
        # LeaderWorkerSets exist: a refused creation stalled the rollout for minutes on the testbed.
        testing.wait_for(
            lambda: (
                keys.CONDEMNED_ANNOTATION
                in ((get_domain(api, ns, old) or {"metadata": {}})["metadata"].get("annotations") or {})
            ),
            what=f"{old} condemned",
            state=testing.state_of(lambda: workloads.ds_summary(api, ns, "crash")),
            interval=0.02,
            timeout=workloads.TIMEOUT,
        )
        kill_ds(testbed)
        controllers.start(testbed, keys.DS_CONTROLLER, gate=True)

        def rolled() -> list[kube.Object] | None:
            [pods] = workloads.wait_slices_running(api, ns, "crash", pods_per_slice={0: 3}).values()
            return pods if workloads.revision_of(pods[0]) != workloads.revision_of(before[0]) else None

        after = testing.wait_for(rolled, what="the new revision running", timeout=240)
        new = workloads.slice_domain("crash", 0, workloads.revision_of(after[0]))
        assert {workloads.domain_of(p) for p in after} == {new}
        workloads.wait_domains(api, ns, {new})
    assert watch.polls > 0
    assert watch.found == []


def test_a_rollout_started_while_mnnvl_ds_is_down_goes_on_once_it_is_back(
    api: kube.Kube, ns: str, testbed: cluster.Testbed
) -> None:
    """mnnvl-ds killed as a rollout starts: while it is down its LeaderWorkerSet webhook fails closed, so upstream's creations of the new revision are refused and it backs off; once back, mnnvl-ds asks upstream to reconcile the set again, the rollout goes on, and no domain in use is ever deleted."""
    workloads.create_ds(api, ns, workloads.ds_manifest("outage", slices=1))
    [before] = workloads.wait_slices_running(api, ns, "outage", pods_per_slice={0: 3}).values()
    log = testbed.state_dir / "logs" / "lws-manager.log"

    def refusals() -> int:
        return sum(
            1
            for line in log.read_text(errors="replace").splitlines()
            if f'"namespace": "{ns}"' in line and 'failed calling webhook \\"validate-leaderworkerset.mnnvl-ds' in line
        )

    with InUseDeletions(testbed.api(), ns).running() as watch:
        workloads.set_role_image(api, ns, "outage", 0, "nvcr.io/nvidia/vllm:2")
        kill_ds(testbed)
        refused_before = refusals()
        testing.wait_for(
            lambda: refusals() >= refused_before + 3,
            what="upstream's creations of the new revision refused (and retried) while mnnvl-ds is down",
            state=lambda: log.read_text(errors="replace")[-2000:],
            timeout=workloads.TIMEOUT,
        )
        restarted_at = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        controllers.start(testbed, keys.DS_CONTROLLER, gate=True)

        def rolled() -> list[kube.Object] | None:
            [pods] = workloads.wait_slices_running(api, ns, "outage", pods_per_slice={0: 3}).values()
            return pods if workloads.revision_of(pods[0]) != workloads.revision_of(before[0]) else None

        after = testing.wait_for(rolled, what="the new revision running", timeout=workloads.TIMEOUT)
        new = workloads.slice_domain("outage", 0, workloads.revision_of(after[0]))
        assert {workloads.domain_of(p) for p in after} == {new}
        workloads.wait_domains(api, ns, {new})
    assert watch.polls > 0
    assert watch.found == []
    asked = api.request("GET", workloads.ds_path(ns, "outage"))["metadata"]["annotations"][
        keys.RECONCILE_REQUESTED_ANNOTATION
    ]
    assert datetime.datetime.fromisoformat(asked) >= restarted_at


@pytest.mark.parametrize("manager", [keys.LWS_CONTROLLER, keys.DS_CONTROLLER])
def test_nobody_but_a_controller_writes_a_domain_as_its_field_manager(
    testbed: cluster.Testbed, api: kube.Kube, ns: str, manager: str
) -> None:
    """A domain created or changed as mnnvl-lws's (mnnvl-ds's) field manager by another user would pass for one
    that controller made (docs/protection.md): its identity webhook refuses the write. The same labels written
    under one's own field manager are let through: such a domain is not ours, and mnnvl leaves it alone."""
    as_us = kube.Kube(kube.load_api_client(testbed.kubeconfig), field_manager=manager)
    manifest = workloads.domain_labelled_as(ns, "spoofed", manager)
    status, message = admission_refusal(lambda: as_us.create(manifest, keys.COMPUTE_DOMAIN_PLURAL))
    assert status == 403, message
    assert f'may write a ComputeDomain as field manager "{manager}", not user "' in message, message
    assert get_domain(api, ns, "spoofed") is None

    created = api.create(manifest, keys.COMPUTE_DOMAIN_PLURAL)
    assert {entry["manager"] for entry in created["metadata"]["managedFields"]} == {cluster.FIELD_MANAGER}
    relabel = {"metadata": {"labels": {keys.OWNER_UID_LABEL: str(uuid.uuid4())}}}
    status, message = admission_refusal(lambda: as_us.patch(domain_path(ns, "spoofed"), relabel))
    assert status == 403, message
    found = get_domain(api, ns, "spoofed")
    assert found is not None
    assert found["metadata"]["labels"] == manifest["metadata"]["labels"]
