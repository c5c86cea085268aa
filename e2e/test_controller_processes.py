"""The controllers run the way the session asked: local processes of this interpreter, or (`--controllers-from-image`,
tox env e2e-image) `buildah run` containers of the built image, as the image's user, in the image's root."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

from mnnvl_api import keys
from mnnvl_testbed import cluster, controllers, image, processes


def uid_of(pid: int) -> int:
    [line] = [line for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")]
    return int(line.split()[1])


@pytest.mark.image_run
def test_each_controller_runs_as_the_session_asked(testbed: cluster.Testbed, mnnvl: None) -> None:
    supervisor = processes.Supervisor(testbed.state_dir)
    from_image = os.environ.get(image.CONTROLLER_IMAGE_VARIABLE)
    for controller in (keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER):
        [replica] = controllers.running_replicas(testbed, controller)
        pid = supervisor.owned_pid(replica.name)
        assert pid is not None, replica.name
        if not from_image:
            assert supervisor.program(replica.name) == sys.executable
            continue
        assert supervisor.program(replica.name) == "buildah"
        inner = image.innermost_process(pid)
        assert inner is not None, f"{replica.name}: nothing runs in its container"
        command = pathlib.Path(f"/proc/{inner}/cmdline").read_bytes().split(b"\0")
        assert command[0].decode() == "/opt/mnnvl/bin/python", command
        assert command[1].decode() == f"/opt/mnnvl/bin/{controller}", command
        assert uid_of(inner) == 65532
        # Its root is the container's, not the host's.
        assert os.readlink(f"/proc/{inner}/root") != "/"
