"""The controllers run the way the session asked: local processes of this interpreter, or (`--controllers-from-image`,
tox env e2e-image) `buildah run` containers of the built image, as the image's user, in the image's root, with no
capabilities."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

from mnnvl_api import keys
from mnnvl_testbed import cluster, controllers, image, processes, testing

#: The KAI Topology CRD release mnnvl-topology needs to start at all (any one will do here).
TOPOLOGY_CRDS = "kai-v0.16.7"


def status_field(pid: int, field: str) -> str:
    [line] = [line for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(field)]
    return line.split(":", 1)[1].strip()


def assert_runs_as_asked(testbed: cluster.Testbed, controller: str) -> None:
    supervisor = processes.Supervisor(testbed.state_dir)
    [replica] = controllers.running_replicas(testbed, controller)
    pid = supervisor.owned_pid(replica.name)
    assert pid is not None, replica.name
    if not os.environ.get(image.CONTROLLER_IMAGE_VARIABLE):
        assert supervisor.program(replica.name) == sys.executable
        return
    assert supervisor.program(replica.name) == "buildah"
    inner = image.container_process(pid)
    assert inner is not None, f"{replica.name}: nothing runs in its container"
    command = pathlib.Path(f"/proc/{inner}/cmdline").read_bytes().split(b"\0")
    assert [part.decode() for part in command[:2]] == ["/opt/mnnvl/bin/python", f"/opt/mnnvl/bin/{controller}"]
    assert status_field(inner, "Uid").split()[:2] == ["65532", "65532"]
    assert status_field(inner, "Gid").split()[:2] == ["65532", "65532"]
    assert int(status_field(inner, "CapEff"), 16) == 0
    assert os.readlink(f"/proc/{inner}/root") != "/"  # the container's root, not the host's


@pytest.mark.image_run
@pytest.mark.parametrize("controller", [keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER])
def test_each_webhook_serving_controller_runs_as_the_session_asked(
    testbed: cluster.Testbed, mnnvl: None, controller: str
) -> None:
    assert_runs_as_asked(testbed, controller)


@pytest.mark.image_run
def test_the_topology_controller_runs_as_the_session_asked(testbed: cluster.Testbed) -> None:
    with_kai = testing.topology_crds(testbed, TOPOLOGY_CRDS)
    controllers.start(with_kai, keys.TOPOLOGY_CONTROLLER)
    try:
        assert_runs_as_asked(with_kai, keys.TOPOLOGY_CONTROLLER)
    finally:
        controllers.stop(with_kai, keys.TOPOLOGY_CONTROLLER)
