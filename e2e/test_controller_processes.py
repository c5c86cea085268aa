"""The controllers run the way the session asked: local processes of this interpreter, or (`--controllers-from-image`,
tox env e2e-image) `buildah run` containers of the built image, as the image's user, in the image's root, with no
capabilities."""

from __future__ import annotations

import json
import os
import pathlib
import sys
from collections.abc import Mapping
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, image, processes, release, testing

from .test_safety import guardian_caught_up

#: The KAI Topology CRD release mnnvl-topology needs to start at all (any one will do here).
TOPOLOGY_CRDS = "kai-v0.16.7"
#: docs/install.md's contexts for OpenShift's restricted-v2: no user, group or fsGroup, left to the platform (and,
#: where nothing sets one, to the image's USER).
OPENSHIFT_CONTEXTS = {
    "podSecurityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    },
}


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


def restart_under(testbed: cluster.Testbed, controller: str, block: Mapping[str, Any]) -> release.Release:
    """`controller`'s running replicas restarted, on their own ports, under the release with `block` as its values,
    as a changed pod template rolls its Deployment."""
    replicas = controllers.running_replicas(testbed, controller)
    installed = release.install(testbed, controller, block)
    controllers.stop(testbed, controller)
    for replica in replicas:
        controllers.revive(testbed, controller, replica)
    return installed


def image_user(built: str) -> list[str]:
    """The `USER` of image `built`, as [uid, gid]."""
    configured: str = json.loads(image.buildah("inspect", "--type", "image", built))["OCIv1"]["config"]["User"]
    return configured.split(":")


@pytest.mark.image_run
def test_the_guardian_under_openshift_contexts_runs_as_the_image_user_and_protects_domains(
    testbed: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    """With docs/install.md's OpenShift contexts (no runAsUser, runAsGroup or fsGroup) the guardian runs as its
    image's USER, reads its mounted files and protects a domain. As a local process (no image) only the release
    and the job are checked: a process has no image user."""
    guardian = keys.GUARDIAN_CONTROLLER
    previous = release.installed_blocks(testbed)[release.BLOCKS[guardian]]
    installed = restart_under(testbed, guardian, {**previous, **OPENSHIFT_CONTEXTS})
    try:
        assert (installed.user(guardian), installed.volume_group(guardian)) == (None, None)
        built = os.environ.get(image.CONTROLLER_IMAGE_VARIABLE)
        if built:
            [replica] = controllers.running_replicas(testbed, guardian)
            pid = processes.Supervisor(testbed.state_dir).owned_pid(replica.name)
            inner = None if pid is None else image.container_process(pid)
            assert inner is not None, f"{replica.name}: nothing runs in its container"
            uid, gid = image_user(built)
            assert status_field(inner, "Uid").split()[:2] == [uid, uid]
            assert status_field(inner, "Gid").split()[:2] == [gid, gid]
        guardian_caught_up(testbed, api, ns)
    finally:
        restart_under(testbed, guardian, previous)


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
