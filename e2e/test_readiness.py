"""Readiness and a graceful stop, on real processes: /readyz fails until the watch stores hold a full list, passes
once they do and the webhook server answers, and fails as soon as SIGTERM comes, while the replica keeps answering
admission requests for its drain period; a replica whose API server is down still stops within its deadline."""

from __future__ import annotations

import os
import pathlib
import signal
import urllib.error
import urllib.request
from collections.abc import Callable

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, processes, release, testing

from . import workloads

#: Long enough for a readiness check and one LeaderWorkerSet's creation while the replica drains.
DRAIN_SECONDS = 3.0
STOP_TIMEOUT_SECONDS = 4.0


def readiness(replica: controllers.Replica) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{replica.health_port}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def restart_as_it_ran(
    supervisor: processes.Supervisor, name: str, *, meanwhile: Callable[[], None] = lambda: None
) -> int:
    """Kill replica `name`, run `meanwhile`, and start it again as it ran (same command, environment and still-valid
    token). Returns the new pid."""
    pid = supervisor.pid(name)
    assert pid is not None
    command = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")
    environment = supervisor.environment(name)
    supervisor.kill(name)
    meanwhile()
    return supervisor.start(name, command, env=environment)


def restart_with_etcd_paused(supervisor: processes.Supervisor, name: str, etcd: int) -> int:
    """`restart_as_it_ran` with etcd paused: its API calls answered from the API server's caches (authentication,
    access reviews, discovery) pass, so it starts, but no fresh list completes."""
    return restart_as_it_ran(supervisor, name, meanwhile=lambda: os.killpg(etcd, signal.SIGSTOP))


def answers_until(
    replica: controllers.Replica, supervisor: processes.Supervisor, wanted: tuple[int, str]
) -> list[tuple[int, str]]:
    """Every distinct /readyz answer of `replica` until it gives `wanted`, in order."""
    answers: list[tuple[int, str]] = []

    def answered() -> bool:
        supervisor.ensure_alive(replica.name)
        try:
            answer = readiness(replica)
        except OSError:  # not listening yet
            return False
        if answer not in answers:
            answers.append(answer)
        return answer == wanted

    testing.wait_for(
        answered, what=f"{replica.name} to answer /readyz with {wanted}", timeout=60, state=lambda: answers
    )
    return answers


def test_readyz_waits_for_synced_stores_and_a_stopping_replica_drains_before_it_exits(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, lws_controller: list[controllers.Replica]
) -> None:
    supervisor = processes.Supervisor(testbed.state_dir)
    etcd = supervisor.owned_pid("etcd")
    assert etcd is not None
    try:
        (replica,) = controllers.start_lws(testbed, extra_config={"shutdown": {"drainSeconds": DRAIN_SECONDS}})
        assert readiness(replica) == (200, "ready")
        try:
            pid = restart_with_etcd_paused(supervisor, replica.name, etcd)
            answers = answers_until(replica, supervisor, (503, "not ready: watch stores not synced: LeaderWorkerSet"))
            # Its webhook server answers now; only the stores hold it back, and it was never ready before.
            assert (200, "ready") not in answers, answers
        finally:
            os.killpg(etcd, signal.SIGCONT)
        testing.wait_for(
            lambda: readiness(replica) == (200, "ready"), what="the replica to be ready once etcd answers", timeout=60
        )

        before = workloads.admissions(replica)
        os.killpg(pid, signal.SIGTERM)
        testing.wait_for(
            lambda: readiness(replica) == (503, "not ready: shutting down"),
            what="readiness to fail once SIGTERM came",
            timeout=DRAIN_SECONDS / 2,
        )
        # Still draining: the replica the webhooks point at answers this creation's admission.
        created = workloads.create_lws(api, ns, workloads.lws_manifest("during-drain", replicas=1, size=1))
        assert supervisor.alive(replica.name), "the replica stopped before its drain was over"
        worker = created["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        assert worker["metadata"]["labels"][keys.SCOPE_LABEL] == keys.SCOPE_REPLICA
        assert workloads.admissions(replica) > before
        testing.wait_for(
            lambda: not supervisor.alive(replica.name),
            what="the replica to exit after its drain",
            timeout=DRAIN_SECONDS + STOP_TIMEOUT_SECONDS + 15,
        )
    finally:
        controllers.start_lws(testbed, gate=True)


def test_a_replica_stops_within_its_deadline_while_the_api_server_is_down(
    testbed: cluster.Testbed, lws_controller: list[controllers.Replica]
) -> None:
    """SIGTERM while kube-apiserver answers nothing (paused: every call hangs until its timeout): the guardian drains,
    then stops, or gives up, before `drainSeconds + stopTimeoutSeconds` are over, well inside the pod's termination
    grace period."""
    supervisor = processes.Supervisor(testbed.state_dir)
    apiserver = supervisor.owned_pid("kube-apiserver")
    assert apiserver is not None
    shutdown = {"drainSeconds": 1, "stopTimeoutSeconds": STOP_TIMEOUT_SECONDS}
    try:
        (replica,) = controllers.start(testbed, keys.GUARDIAN_CONTROLLER, extra_config={"shutdown": shutdown})
        pid = supervisor.owned_pid(replica.name)
        assert pid is not None
        os.killpg(apiserver, signal.SIGSTOP)
        try:
            os.killpg(pid, signal.SIGTERM)
            testing.wait_for(
                lambda: not supervisor.alive(replica.name),
                what="the guardian to exit with its API server answering nothing",
                timeout=1 + STOP_TIMEOUT_SECONDS + 3,
            )
        finally:
            os.killpg(apiserver, signal.SIGCONT)
    finally:
        controllers.start(testbed, keys.GUARDIAN_CONTROLLER, gate=True)


def test_with_the_gate_off_and_no_computedomain_rbac_a_replica_is_ready(
    testbed: cluster.Testbed, lws_replicas: list[controllers.Replica]
) -> None:
    """The chart's defaults: the AutoComputeDomain gate off and no ComputeDomain RBAC (the testbed grants it
    always, so the test takes it away). The replica cannot list domains, so its stores never sync, yet it is ready:
    with the gate off its webhooks refuse every opt-in whatever the stores hold."""
    lws = keys.LWS_CONTROLLER
    api = testbed.api()
    try:
        [replica] = controllers.start(testbed, lws, gate=False)
        role = kube.path_of(
            "rbac.authorization.k8s.io/v1", "clusterroles", name=release.rendered(testbed).service_account(lws)
        )
        api.modify(
            role,
            lambda found: [
                {"op": "remove", "path": f"/rules/{index}"}
                for index, rule in reversed(list(enumerate(found["rules"])))
                if keys.COMPUTE_DOMAIN_PLURAL in rule.get("resources", [])
            ],
        )
        supervisor = processes.Supervisor(testbed.state_dir)
        restart_as_it_ran(supervisor, replica.name)
        answers_until(replica, supervisor, (200, "ready"))
        domains = f"{keys.COMPUTE_DOMAIN_PLURAL}.{keys.COMPUTE_DOMAIN_API_VERSION}"
        testing.wait_for(
            lambda: workloads.metric(replica, "mnnvl_store_resync_errors_total", {"resource": domains}) > 0,
            what="the replica's ComputeDomain list to be refused (its stores cannot sync)",
            timeout=60,
        )
        assert readiness(replica) == (200, "ready")
    finally:
        controllers.start(testbed, lws, gate=True)
