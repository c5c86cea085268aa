"""An API-server restart: the controllers ride it out as the same processes, and work on afterwards.

kube-apiserver is stopped long enough for every controller's fresh lists to fail (its port refuses connections),
then started again. No controller may end a loop over it: a loop that ended would fail /healthz and have the
kubelet restart the controller, its webhooks failing closed meanwhile.
"""

from __future__ import annotations

import functools
import urllib.error
import urllib.request

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, processes, testing

from . import workloads

CONTROLLERS = (keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER)


def failed_resyncs(replica: controllers.Replica) -> float:
    """`mnnvl_store_resync_errors_total`, summed over resources, from the replica's own metrics endpoint (which
    answers whether the API server does or not)."""
    return workloads.metric(replica, "mnnvl_store_resync_errors_total")


def failed_again_since(replica: controllers.Replica, failures: float) -> bool:
    """Two more fresh lists failed: the store sync kept going after the first failure."""
    return failed_resyncs(replica) >= failures + 2


def healthy(replica: controllers.Replica) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{replica.health_port}/healthz", timeout=5) as response:
            answered: int = response.status
    except urllib.error.HTTPError:
        return False
    return answered == 200


def test_the_controllers_outlive_an_api_server_restart_as_the_same_processes(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, lws_controller: list[controllers.Replica]
) -> None:
    """While kube-apiserver is down, each of mnnvl-lws, mnnvl-ds and mnnvl-guardian has fresh lists fail, one after
    the other, and stays healthy; once it is back, the same processes (same pids) are healthy, and a LeaderWorkerSet opted in then gets
    its ComputeDomain and its pods are ungated and run."""
    supervisor = processes.Supervisor(testbed.state_dir)
    replicas = {controller: controllers.running_replicas(testbed, controller)[0] for controller in CONTROLLERS}
    pids = {controller: supervisor.pid(replica.name) for controller, replica in replicas.items()}
    assert all(healthy(replica) for replica in replicas.values())
    before = {controller: failed_resyncs(replica) for controller, replica in replicas.items()}

    with cluster.apiserver_stopped(testbed):
        for controller, replica in replicas.items():
            testing.wait_for(
                functools.partial(failed_again_since, replica, before[controller]),
                what=f"{controller} to have fresh lists fail, and go on, while the API server is down",
                timeout=90,
            )
        assert {controller: healthy(replica) for controller, replica in replicas.items()} == dict.fromkeys(
            CONTROLLERS, True
        )

    for controller, replica in replicas.items():
        assert supervisor.alive(replica.name), f"{controller} exited"
        assert supervisor.pid(replica.name) == pids[controller], f"{controller} was restarted"
        testing.wait_for(functools.partial(healthy, replica), what=f"{controller} to report healthy", timeout=30)

    workloads.create_lws(api, ns, workloads.lws_manifest("after", replicas=1, size=2))
    pods = workloads.wait_groups_running(api, ns, "after", replicas=1, size=2)
    assert not any(workloads.is_gated(pod) for pod in pods)
    domain = workloads.domain_of(pods[0])
    assert domain is not None
    assert domain in workloads.domains(api, ns)
    assert {controller: healthy(replica) for controller, replica in replicas.items()} == dict.fromkeys(
        CONTROLLERS, True
    )
