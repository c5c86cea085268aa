from __future__ import annotations

import base64
import pathlib
import socket
import sys
import uuid
from typing import Any

import pytest
import yaml

from mnnvl_api import keys
from mnnvl_testbed import cluster, grove, manifests, processes, waiting


def test_a_component_that_dies_is_named_with_the_end_of_its_log(tmp_path: pathlib.Path) -> None:
    supervisor = processes.Supervisor(tmp_path)
    supervisor.start(
        "broken", [sys.executable, "-c", "import sys; print('listening failed: port in use'); sys.exit(3)"]
    )
    waiting.wait_for(lambda: not supervisor.alive("broken"), what="the broken component to exit", timeout=20)
    with pytest.raises(processes.ComponentError) as failure:
        supervisor.ensure_alive("broken")
    message = str(failure.value)
    assert message.startswith("broken: exited during start-up")
    assert "listening failed: port in use" in message


def test_stopping_a_component_ends_its_process(tmp_path: pathlib.Path) -> None:
    supervisor = processes.Supervisor(tmp_path)
    supervisor.start("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"])
    assert supervisor.alive("sleeper")
    supervisor.stop("sleeper")
    assert not supervisor.alive("sleeper")
    assert supervisor.names() == []


def test_a_pid_file_is_never_seen_half_written(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chaos run reads pid files while it starts replicas again: each appears whole, by a rename."""
    written: list[pathlib.Path] = []
    write_text = pathlib.Path.write_text

    def recording(path: pathlib.Path, *args: Any, **kwargs: Any) -> int:
        written.append(path)
        return write_text(path, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", recording)
    supervisor = processes.Supervisor(tmp_path)
    pid = supervisor.start("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert supervisor.pid("sleeper") == pid
        assert supervisor.pids / "sleeper.pid" not in written
        assert sorted(path.name for path in supervisor.pids.iterdir()) == ["sleeper.pid"]
    finally:
        supervisor.stop("sleeper")


def test_a_wait_that_times_out_shows_the_state_last_seen() -> None:
    with pytest.raises(waiting.WaitTimeoutError, match=r"waiting for the impossible; last seen:\nstate 42"):
        waiting.wait_for(lambda: None, what="the impossible", timeout=0.3, interval=0.1, state=lambda: "state 42")


def test_a_wait_returns_the_first_truthy_result() -> None:
    results = iter([None, False, {"ready": True}])
    assert waiting.wait_for(lambda: next(results), what="readiness", timeout=5, interval=0.01) == {"ready": True}


def test_fake_nodes_fill_cliques_of_four() -> None:
    nodes = [manifests.fake_node(index) for index in range(8)]
    cliques = [node["metadata"]["labels"][keys.GPU_CLIQUE_LABEL] for node in nodes]
    assert cliques[:4] == [cliques[0]] * 4
    assert cliques[4:] == [cliques[4]] * 4
    assert cliques[0] != cliques[4]
    assert cliques[0].endswith(".0")
    assert nodes[5]["metadata"]["name"] == "gb200-005"
    assert nodes[5]["status"]["capacity"][keys.GPU_RESOURCE] == "4"


def test_nvl72_racks_hold_18_nodes_and_are_labelled_as_the_driver_labels_cliques() -> None:
    profile = cluster.PROFILES["nvl72"]
    assert (profile.nodes, profile.nodes_per_clique) == (36, 18)
    nodes = [manifests.fake_node(index, nodes_per_clique=profile.nodes_per_clique) for index in range(profile.nodes)]
    cliques = [node["metadata"]["labels"][keys.GPU_CLIQUE_LABEL] for node in nodes]
    assert cliques == [cliques[0]] * 18 + [cliques[18]] * 18
    assert cliques[0] != cliques[18]
    for clique in (cliques[0], cliques[18]):
        cluster_uuid, _, clique_id = clique.partition(".")
        assert str(uuid.UUID(cluster_uuid)) == cluster_uuid
        assert clique_id.isdigit()


def test_lws_webhooks_are_pointed_at_the_local_manager_and_pod_webhooks_only_see_lws_pods() -> None:
    upstream: list[dict[str, Any]] = [
        {
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                {
                    "name": "mleaderworkerset.kb.io",
                    "clientConfig": {"service": {"path": "/mutate-lws"}},
                    "rules": [{"resources": ["leaderworkersets"]}],
                },
                {
                    "name": "mpod.kb.io",
                    "clientConfig": {"service": {"path": "/mutate--v1-pod"}},
                    "rules": [{"resources": ["pods"]}],
                },
            ],
        }
    ]
    [local] = manifests.local_lws_webhooks(upstream, base_url="https://127.0.0.1:9443", ca_bundle=b"CA")
    assert local["metadata"]["name"] == "lws-mutating-webhook-configuration"
    lws_hook, pod_hook = local["webhooks"]
    assert lws_hook["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-lws",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    assert "objectSelector" not in lws_hook
    assert pod_hook["objectSelector"] == {"matchExpressions": [{"key": keys.LWS_NAME_LABEL, "operator": "Exists"}]}
    assert upstream[0]["metadata"]["name"] == "mutating-webhook-configuration"


def test_a_container_command_gets_its_variables_as_a_kubelet_expands_them() -> None:
    command = ["compute-domain-controller", "-v", "$(LOG_VERBOSITY)", "$(UNSET)"]
    container: dict[str, Any] = {
        "command": command,
        "env": [
            {"name": "LOG_VERBOSITY", "value": 2},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
    }
    environment = manifests.container_environment(container, pod_name="dra-controller-0", namespace="driver")
    assert environment == {"LOG_VERBOSITY": "2", "POD_NAME": "dra-controller-0", "NAMESPACE": "driver"}
    # A reference to an unset variable stays as written, as a kubelet leaves it.
    assert manifests.expanded_command(command, environment) == [
        "compute-domain-controller",
        "-v",
        "2",
        "$(UNSET)",
    ]


def test_a_pid_file_naming_another_program_is_never_signalled(tmp_path: pathlib.Path) -> None:
    supervisor = processes.Supervisor(tmp_path)
    pid = supervisor.start("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"])
    cmdline = pathlib.Path(f"/proc/{pid}/cmdline")
    waiting.wait_for(cmdline.read_bytes, what="the sleeper to have started its program", timeout=20)
    pid_file = tmp_path / "pids" / "sleeper.pid"
    pid_file.write_text(f"{pid} /usr/bin/some-other-program")  # as if the pid had been reused
    assert supervisor.owned_pid("sleeper") is None
    supervisor.stop("sleeper")
    assert not pid_file.exists()
    pid_file.write_text(f"{pid} {sys.executable}")
    assert supervisor.alive("sleeper")
    assert supervisor.owned_pid("sleeper") == pid
    supervisor.stop("sleeper")
    assert not supervisor.alive("sleeper")


@pytest.mark.parametrize(
    ("ephemeral", "expected"),
    [((32768, 60999), range(20480, 32768)), ((1024, 60000), range(60001, 65536)), ((6000, 9000), range(1024, 6000))],
)
def test_ports_for_components_are_picked_outside_the_range_outgoing_connections_take_theirs_from(
    ephemeral: tuple[int, int], expected: range
) -> None:
    assert processes.listening_ports(ephemeral) == expected


def test_a_free_port_is_free_outside_the_ephemeral_range_and_never_handed_out_twice() -> None:
    low, high = (int(part) for part in processes.EPHEMERAL_RANGE.read_text().split())
    ports = [processes.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert not any(low <= port <= high for port in ports)
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))


def test_grove_listens_on_loopback_ports_of_its_own_and_its_webhooks_are_called_by_url() -> None:
    """The chart's operator configuration keeps what the chart set, listeners move to 127.0.0.1; its webhook
    configurations call the local operator at the chart's paths with the chart's CA bundle."""
    chart_config = {
        "leaderElection": {"enabled": False},
        "server": {
            "webhooks": {
                "port": 9443,
                "serverCertDir": "/etc/grove-operator/webhook-certs",
                "certProvisionMode": "manual",
            },
            "healthProbes": {"port": 9444},
            "metrics": {"port": 9445},
        },
    }
    webhook = {
        "name": "pcs.defaulting.webhooks.grove.io",
        "clientConfig": {
            "caBundle": "Q0E=",
            "service": {
                "name": "grove-operator",
                "namespace": "grove-system",
                "path": "/webhooks/default-podcliqueset",
                "port": 9443,
            },
        },
    }
    rendered: list[dict[str, Any]] = [
        {"kind": "ConfigMap", "data": {"config.yaml": yaml.safe_dump(chart_config)}},
        {"kind": "MutatingWebhookConfiguration", "metadata": {"name": "podcliqueset-defaulting-webhook"}, "webhooks": [webhook]},
    ]  # fmt: skip
    ports = {"webhooks": 1, "healthProbes": 2, "metrics": 3}
    config = grove.configuration(rendered, ports=ports, cert_dir=pathlib.Path("/state/grove/certs"))
    assert config == {
        "leaderElection": {"enabled": False},
        "server": {
            "webhooks": {"port": 1, "bindAddress": "127.0.0.1", "serverCertDir": "/state/grove/certs", "certProvisionMode": "manual"},
            "healthProbes": {"port": 2, "bindAddress": "127.0.0.1"},
            "metrics": {"port": 3, "bindAddress": "127.0.0.1"},
        },
    }  # fmt: skip
    [configuration] = grove.local_webhooks(rendered, base_url="https://127.0.0.1:1")
    assert configuration["webhooks"][0]["clientConfig"] == {
        "caBundle": "Q0E=",
        "url": "https://127.0.0.1:1/webhooks/default-podcliqueset",
    }
