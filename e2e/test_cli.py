"""`kubectl mnnvl`: status, explain, doctor and gc against the testbed, run as the console script a user runs, with
the user's kubeconfig (never talking to a controller)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, testing

from . import workloads

#: The gate-toggling test restarts these, as the gate is cluster-wide (see test_disabling_the_gate).
CONTROLLERS = (keys.GUARDIAN_CONTROLLER, keys.LWS_CONTROLLER, keys.DS_CONTROLLER)


def kubectl_mnnvl(kubeconfig: pathlib.Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script's entry point, as `kubectl mnnvl ARGS` runs it, in a clean environment."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "NO_COLOR": "1"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [sys.executable, "-m", "mnnvl_cli", *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def data_of(testbed: cluster.Testbed, *args: str) -> Any:
    finished = kubectl_mnnvl(testbed.kubeconfig, *args, "-o", "json")
    assert finished.returncode == 0, finished.stderr
    return json.loads(finished.stdout)


def assert_one_line_error(finished: subprocess.CompletedProcess[str], *expected: str) -> None:
    """A user error: exit code 2, one line on stderr naming the fix, no traceback."""
    assert finished.returncode == 2, (finished.stdout, finished.stderr)
    assert finished.stderr.count("\n") == 1, finished.stderr
    assert finished.stderr.startswith("error: "), finished.stderr
    assert "Traceback" not in finished.stderr
    for words in expected:
        assert words in finished.stderr


def test_status_shows_each_group_its_domain_its_pods_and_an_obsolete_domain_waiting_for_a_pod(
    api: kube.Kube, ns: str, testbed: cluster.Testbed
) -> None:
    """`status`: per group its ComputeDomain, ready and since when, its pods with gate, phase, node and clique, which
    containers hold the claim and why the others do not; a domain that is obsolete waits for the pod named."""
    workloads.create_lws(api, ns, workloads.lws_manifest("seed", replicas=2, size=2))
    workloads.create_lws(api, ns, workloads.lws_manifest("plain", replicas=1, size=1, opt_in=None))
    pods = workloads.wait_groups_running(api, ns, "seed", replicas=2, size=2)
    domains = {group: str(domain) for group, domain in workloads.group_domains(pods).items()}

    [status] = data_of(testbed, "status", "-n", ns)["workloads"]  # `plain` did not opt in: not listed
    assert (status["kind"], status["name"], status["optIn"]) == ("LeaderWorkerSet", "seed", "enabled")
    units = {unit["group"]: unit for unit in status["units"]}
    assert set(units) == {"0", "1"}
    for group, unit in units.items():
        assert unit["domain"]["name"] == domains[group]
        assert unit["domain"]["ready"]
        assert unit["domain"]["since"]
        for pod in unit["pods"]:
            assert (pod["phase"], pod["gated"], pod["domain"]) == ("Running", False, domains[group])
            assert pod["node"]
            assert pod["clique"]
            assert (pod["claimIn"], pod["noClaim"]) == (["vllm"], {"routing-proxy": "CPU-only"})
    assert status["obsoleteDomains"] == []

    [plain] = data_of(testbed, "status", "-n", ns, "lws/plain")["workloads"]
    assert plain["units"][0]["pods"][0]["noClaim"]["vllm"] == "workload not opted in"

    # The same facts as YAML; the table fits 120 columns.
    as_yaml = kubectl_mnnvl(testbed.kubeconfig, "status", "-n", ns, "-o", "yaml")
    assert yaml.safe_load(as_yaml.stdout) == data_of(testbed, "status", "-n", ns)
    table = kubectl_mnnvl(testbed.kubeconfig, "status", "-n", ns)
    assert table.returncode == 0
    assert f"group 1: ComputeDomain {domains['1']} ready for" in table.stdout
    assert all(len(line) <= 120 for line in table.stdout.splitlines())
    assert "\x1b[" not in table.stdout

    # Scale down with group 1's worker held Terminating: its domain is obsolete and waits for that pod.
    worker = kube.path_of("v1", "pods", namespace=ns, name="seed-1-1")
    api.patch(worker, {"metadata": {"finalizers": [workloads.HOLD_FINALIZER]}})
    try:
        workloads.patch_lws(api, ns, "seed", {"spec": {"replicas": 1}})

        def waiting() -> list[Any] | None:
            [found] = data_of(testbed, "status", "-n", ns, "seed")["workloads"]
            obsolete = found["obsoleteDomains"]
            return obsolete if obsolete and obsolete[0]["waitingFor"] == ["seed-1-1"] else None

        [obsolete] = testing.wait_for(
            waiting,
            what="the scaled-down group's domain listed as obsolete, waiting for its held worker",
            state=testing.state_of(lambda: workloads.summary(api, ns)),
            timeout=workloads.TIMEOUT,
        )
        assert obsolete["name"] == domains["1"]
    finally:
        api.patch(worker, {"metadata": {"finalizers": None}})
    workloads.wait_domains(api, ns, {domains["0"]})


def test_status_watch_redraws_when_a_group_is_added(api: kube.Kube, ns: str, testbed: cluster.Testbed) -> None:
    workloads.create_lws(api, ns, workloads.lws_manifest("watched", replicas=1, size=1))
    workloads.wait_groups_running(api, ns, "watched", replicas=1, size=1)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "KUBECONFIG": str(testbed.kubeconfig)}
    watching = subprocess.Popen(
        [sys.executable, "-m", "mnnvl_cli", "status", "-n", ns, "--watch"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert watching.stdout is not None
        for line in watching.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        testing.wait_for(
            lambda: any("group 0: ComputeDomain" in line for line in lines), what="the first frame", timeout=60
        )
        assert not any("group 1:" in line for line in lines)
        workloads.patch_lws(api, ns, "watched", {"spec": {"replicas": 2}})
        testing.wait_for(
            lambda: any("group 1: ComputeDomain" in line and "ready" in line for line in lines),
            what="a frame with the new group's domain ready",
            state=lambda: "".join(lines[-20:]),
            timeout=workloads.TIMEOUT,
        )
        assert watching.poll() is None  # it keeps watching
    finally:
        watching.terminate()
        watching.communicate(timeout=30)


def test_explain_names_a_collision_with_a_foreign_domain_and_the_object_to_look_at(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, lws_replicas: list[controllers.Replica]
) -> None:
    """`explain POD`: a gated pod whose domain's name is taken by a foreign ComputeDomain."""
    name = workloads.leader_behind_a_foreign_domain(api, ns, lws_replicas[0])

    found = data_of(testbed, "explain", "-n", ns, "clash-0")
    assert found["verdict"].startswith(f"gated until ComputeDomain {name} is ready: name collision")
    links = {link["about"]: link for link in found["links"]}
    assert links["domain"]["problem"]
    assert links["domain"]["lookAt"] == f"kubectl -n {ns} get computedomain {name} -o yaml"
    assert "not managed by mnnvl" in links["domain"]["finding"]
    assert links["claim"]["finding"].startswith(f"{keys.CHANNEL_CLAIM_NAME} held by vllm")
    text = kubectl_mnnvl(testbed.kubeconfig, "explain", "-n", ns, "clash-0")
    assert text.returncode == 0
    assert "✗ domain" in text.stdout
    assert "name collision" in text.stdout


def test_user_errors_are_one_line_naming_the_fix(api: kube.Kube, ns: str, testbed: cluster.Testbed) -> None:
    assert_one_line_error(
        kubectl_mnnvl(testbed.kubeconfig, "explain", "-n", ns, "no-such-pod"),
        f"pod no-such-pod not found in namespace {ns}; pass -n NAMESPACE",
    )
    assert_one_line_error(kubectl_mnnvl(None, "status"), "no Kubernetes credentials", "--kubeconfig")
    assert_one_line_error(kubectl_mnnvl(pathlib.Path("/nonexistent/kubeconfig"), "status"), "/nonexistent/kubeconfig")
    stranger = controllers.user_kubeconfig(testbed, "cli-stranger")
    assert_one_line_error(kubectl_mnnvl(stranger, "status", "-n", ns), "forbidden", "RBAC")
    assert_one_line_error(kubectl_mnnvl(testbed.kubeconfig, "status", "-n", ns, "lws/missing"), "no LeaderWorkerSet or")


def test_without_the_compute_domain_api_status_and_doctor_say_what_is_missing(
    cluster_without_the_driver: cluster.Testbed,
) -> None:
    """A bare control plane: neither the ComputeDomain API nor LeaderWorkerSets are served."""
    assert_one_line_error(
        kubectl_mnnvl(cluster_without_the_driver.kubeconfig, "status"), "does not serve leaderworkersets"
    )
    doctor = kubectl_mnnvl(cluster_without_the_driver.kubeconfig, "doctor", "-o", "json")
    assert doctor.returncode == 2, doctor.stderr
    failed = " ".join(c["finding"] for c in json.loads(doctor.stdout)["checks"] if c["outcome"] == "fail")
    assert keys.COMPUTE_DOMAIN_PLURAL in failed
    assert keys.LWS_PLURAL in failed


def checks(testbed: cluster.Testbed) -> tuple[int, list[dict[str, Any]]]:
    finished = kubectl_mnnvl(testbed.kubeconfig, "doctor", "-o", "json")
    assert finished.returncode in (0, 1, 2), finished.stderr
    return finished.returncode, json.loads(finished.stdout)["checks"]


def failures(found: list[dict[str, Any]]) -> list[str]:
    return [f"{c['name']}: {c['finding']}" for c in found if c["outcome"] == "fail"]


@pytest.fixture
def ds_restored(testbed: cluster.Testbed, lws_controller: list[controllers.Replica]) -> Iterator[None]:
    """mnnvl-ds reinstalled from the chart and running again afterwards (its webhooks registered again)."""
    yield
    controllers.start(testbed, keys.DS_CONTROLLER, gate=True)


def test_doctor_passes_a_healthy_testbed_then_fails_a_stale_lease_and_a_missing_webhook(
    api: kube.Kube, testbed: cluster.Testbed, ds_restored: None
) -> None:
    code, found = checks(testbed)
    assert failures(found) == []
    assert code in (0, 1)
    text = kubectl_mnnvl(testbed.kubeconfig, "doctor")
    assert text.returncode == code
    assert all(len(line) <= 120 for line in text.stdout.splitlines())

    # mnnvl-ds stops: its Lease is no longer renewed and its webhooks no longer answer.
    controllers.stop(testbed, keys.DS_CONTROLLER)

    def lease_stale() -> list[str] | None:
        code, found = checks(testbed)
        failed = [f for f in failures(found) if keys.DS_CONTROLLER in f and "Lease" in f]
        return failed if code == 2 and failed else None

    testing.wait_for(lease_stale, what="doctor to fail mnnvl-ds's stale Lease", timeout=120)
    _, found = checks(testbed)
    assert any("failed calling webhook" in f and keys.DS_CONTROLLER in f for f in failures(found)), failures(found)

    # One of its webhook configurations deleted.
    [validating] = [
        c
        for c in api.list_objects(
            "admissionregistration.k8s.io/v1",
            "validatingwebhookconfigurations",
            labelSelector="app.kubernetes.io/part-of=mnnvl",
        )
        if c["metadata"]["name"].endswith("-ds-validating")
    ]
    api.request(
        "DELETE",
        kube.path_of(
            "admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", name=validating["metadata"]["name"]
        ),
    )
    _, found = checks(testbed)
    missing = [f for f in failures(found) if "validate-disaggregatedset.mnnvl-ds.mnnvl.dev" in f]
    assert missing, failures(found)


@pytest.fixture
def gate_toggle(testbed: cluster.Testbed, lws_controller: list[controllers.Replica]) -> Iterator[None]:
    """Lets a test restart mnnvl's controllers with the gate off; afterwards they run with the gate on again."""
    yield
    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=True)


def test_gc_lists_domains_of_workloads_deleted_while_the_gate_was_off_and_deletes_only_unused_ones(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, gate_toggle: None
) -> None:
    """Managed domains of a workload deleted while the gate is disabled are not garbage collected; `gc` lists them
    with the pods still using each, and `--apply` deletes (fenced) only those no pod uses."""
    workloads.create_lws(api, ns, workloads.lws_manifest("orphaned", replicas=2, size=2))
    running = workloads.wait_groups_running(api, ns, "orphaned", replicas=2, size=2)
    domains = {group: str(domain) for group, domain in workloads.group_domains(running).items()}
    assert data_of(testbed, "gc", "-n", ns)["orphans"] == []

    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=False)
    with workloads.deleted_but_one_worker(api, ns, "orphaned", "orphaned-1-1"):
        listed = {o["name"]: o for o in data_of(testbed, "gc", "-n", ns)["orphans"]}
        assert set(listed) == set(domains.values())
        assert (listed[domains["0"]]["action"], listed[domains["0"]]["users"]) == ("delete", [])
        assert (listed[domains["1"]]["action"], listed[domains["1"]]["users"]) == ("keep", ["orphaned-1-1"])
        assert set(workloads.domains(api, ns)) == set(domains.values())  # a dry run changes nothing

        applied = data_of(testbed, "gc", "-n", ns, "--apply")
        assert applied["outcome"][f"{ns}/{domains['0']}"] in ("deleted and released", "deleted")
        workloads.wait_domains(api, ns, {domains["1"]})
        kept = workloads.domains(api, ns)[domains["1"]]
        assert not kept["metadata"].get("deletionTimestamp")  # refused: a pod still uses it
        assert keys.CONDEMNED_ANNOTATION not in (kept["metadata"].get("annotations") or {})
    testing.wait_for(lambda: testing.pods(api, ns) == [], what="the held worker gone", timeout=60)
    applied = data_of(testbed, "gc", "-n", ns, "--apply")
    assert applied["outcome"][f"{ns}/{domains['1']}"] in ("deleted and released", "deleted")
    workloads.wait_domains(api, ns, set())
    # Both went as the fenced deletion does: no teardown of a domain while a pod used it (the `ns` fixture checks).
    assert {t["domain"] for t in testing.teardowns(api, ns)} == set(domains.values())
