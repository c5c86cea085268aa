"""Uninstalling the release (docs/install.md, "Uninstalling"), as `helm uninstall` does it: the chart's pre-delete
hook refuses while mnnvl still manages something, names what, and nothing is deleted (and so does its check of
disabling one controller, as `helm upgrade --set lws.enabled=false` runs it); after the documented order
(delete the workloads, wait until the controllers have deleted their domains) it passes, every object of the release
goes and nothing of mnnvl's is left behind. The session's install comes back afterwards (`restored`)."""

from __future__ import annotations

import pytest

from mnnvl_api import keys
from mnnvl_cli import uninstall
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, dra_driver, processes, release, testing

from . import workloads
from .conftest import SESSION

#: The hook objects of the release: its check's ServiceAccount, ClusterRole, ClusterRoleBinding (and Job).
HOOK = f"{release.RELEASE}-uninstall-check"


def release_objects(api: kube.Kube) -> set[tuple[str, str]]:
    """(kind, name) of every object of the release on the API server, hooks included."""
    found = set()
    for kind, resource in release.RESOURCES.items():
        namespace = release.NAMESPACE if resource.namespaced else None
        listed = api.list_objects(
            resource.api_version, resource.plural, namespace=namespace, labelSelector=release.RELEASE_SELECTOR
        )
        found |= {(kind, item["metadata"]["name"]) for item in listed}
    return found


def left_behind(api: kube.Kube) -> list[uninstall.Leftover]:
    return uninstall.read(api, uninstall.CONTROLLERS)


def test_uninstall_is_refused_while_mnnvl_manages_something_and_clean_after_the_documented_order(
    restored: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    workloads.create_lws(api, ns, workloads.lws_manifest("serving", replicas=1, size=2))
    pods = workloads.wait_groups_running(api, ns, "serving", replicas=1, size=2)
    [domain] = set(workloads.group_domains(pods).values())
    installed = release_objects(api)
    assert ("ClusterRole", "mnnvl-guardian") in installed
    assert not any(name == HOOK for _, name in installed)  # hooks are never applied on install

    supervisor = processes.Supervisor(restored.state_dir)
    supervisor.stop(dra_driver.COMPONENT)  # no driver: the next group's domain gets no claim template, so it is gated
    try:
        workloads.create_lws(api, ns, workloads.lws_manifest("held", replicas=1, size=2))

        def gated() -> bool:
            held = workloads.lws_pods(api, ns, "held")
            return len(held) == 2 and all(map(workloads.is_gated, held))

        testing.wait_for(
            gated,
            what="both pods of held gated",
            state=testing.state_of(lambda: workloads.summary(api, ns)),
            timeout=60,
        )
        with pytest.raises(release.UninstallRefusedError) as refused:
            release.uninstall_all(restored)
        # `helm upgrade --set lws.enabled=false` uninstalls mnnvl-lws alone: its pre-upgrade check refuses as well.
        with pytest.raises(release.UninstallRefusedError) as disabling_refused:
            controllers.uninstall(restored, keys.LWS_CONTROLLER)
    finally:
        cluster.start_driver_part(supervisor, restored, dra_driver.COMPONENT)
    # Checked for mnnvl-lws alone.
    assert (
        str(disabling_refused.value).splitlines()[1].startswith(f"Uninstalling {keys.LWS_CONTROLLER} now would leave ")
    ), disabling_refused.value
    for message in (refused.value, disabling_refused.value):
        listed = str(message).splitlines()
        for named in (
            f"- LeaderWorkerSet {ns}/serving",
            f"- LeaderWorkerSet {ns}/held",
            f"- Pod {ns}/held-0",
            f"- Pod {ns}/held-0-1",
            f"- ComputeDomain {ns}/{domain}",
        ):
            assert named in listed, message
    # Nothing of the release was deleted, mnnvl-lws still runs; the failed hook's RBAC stays, as Helm keeps a failed
    # hook's objects.
    assert release_objects(api) == installed | {
        (kind, HOOK) for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    }
    assert all(controllers.running_replicas(restored, controller) for controller in SESSION)

    # The documented order: delete the workloads, wait until the controllers have deleted their domains.
    for name in ("serving", "held"):
        api.request("DELETE", workloads.lws_path(ns, name))
    testing.wait_for(
        lambda: left_behind(api) == [],
        what="nothing left behind: the controllers deleted their domains",
        state=lambda: uninstall.as_text(left_behind(api), uninstall.CONTROLLERS),
        timeout=60,
    )
    assert workloads.domains(api, ns) == {}
    release.uninstall_all(restored)
    for controller in SESSION:
        controllers.stop(restored, controller)
    assert release_objects(api) == set()  # the release's objects and the hook's
    assert left_behind(api) == []  # and no managed domain is left, Terminating or not
