from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import chart, cluster, controllers, kind, release, testing, versions

from . import workloads

#: What the e2e session runs, in the order it starts them.
SESSION = (keys.GUARDIAN_CONTROLLER, keys.DS_CONTROLLER, keys.LWS_CONTROLLER)


@pytest.fixture(scope="session")
def lws_controller(testbed: cluster.Testbed) -> list[controllers.Replica]:
    """mnnvl-lws, mnnvl-ds and mnnvl-guardian from this source tree, gate enabled, webhooks registered."""
    # From this tree's chart, even when an interrupted upgrade test left the release at another version's.
    release.upgrade(testbed, chart.CHART_DIR)
    controllers.start(testbed, keys.GUARDIAN_CONTROLLER, gate=True)
    controllers.start(testbed, keys.DS_CONTROLLER, gate=True)
    return controllers.start_lws(testbed, gate=True)


@pytest.fixture
def restored(testbed: cluster.Testbed, mnnvl: None) -> Iterator[cluster.Testbed]:
    """Whatever the test leaves, the session's install comes back: topology, which only its own tests run,
    uninstalled; lws, ds and guardian installed again and started with the gate on where they are not running
    (the tests that use this only ever start them with the gate on)."""
    yield testbed
    for controller in release.BLOCKS:
        if controller not in SESSION and release.BLOCKS[controller] in release.installed_blocks(testbed):
            controllers.uninstall(testbed, controller)
    for controller in SESSION:
        if not controllers.running_replicas(testbed, controller):
            controllers.start(testbed, controller, gate=True)


@pytest.fixture(scope="session")
def mnnvl(backend: str, request: pytest.FixtureRequest) -> None:
    """mnnvl-lws, mnnvl-ds and mnnvl-guardian running with the gate enabled and their webhooks registered: local
    processes on the testbed, the chart's Deployments on kind."""
    request.getfixturevalue("kind_installation" if backend == kind.KIND else "lws_controller")


@pytest.fixture
def cluster_without_the_driver(tmp_path: pathlib.Path) -> Iterator[cluster.Testbed]:
    """A second, bare control plane (etcd and kube-apiserver only): no ComputeDomain API is served."""
    state_dir = tmp_path / "bare"
    bare = cluster.up(state_dir, api_server_only=True, echo=False)
    try:
        yield bare
    finally:
        cluster.down(state_dir)


@pytest.fixture(
    params=[versions.COMPUTE_DOMAIN_CRD, versions.LEGACY_COMPUTE_DOMAIN_CRD],
    ids=[f"driver-{release}" for release in (versions.COMPUTE_DOMAIN_CRD, versions.LEGACY_COMPUTE_DOMAIN_CRD)],
)
def computedomain_crd(testbed: cluster.Testbed, request: pytest.FixtureRequest) -> Iterator[str]:
    """The driver's ComputeDomain CRD at each release the controllers support: its main branch (numNodes optional)
    and v25.12.0 (numNodes required), switched in place under the running controllers as a driver upgrade would."""
    release: str = request.param
    with testing.computedomain_crd(testbed, release):
        yield release


@pytest.fixture
def lws_replicas(testbed: cluster.Testbed, lws_controller: list[controllers.Replica]) -> list[controllers.Replica]:
    """The mnnvl-lws replicas running now (tests may have restarted them since the session began)."""
    return controllers.running_replicas(testbed)


@pytest.fixture
def ns(api: kube.Kube, request: pytest.FixtureRequest, mnnvl: None) -> Iterator[str]:
    """A namespace per test; afterwards, the teardown witness must have recorded no teardown of an in-use domain."""
    prefix = request.node.name.replace("_", "-").lower().removeprefix("test-")
    with testing.namespace(api, prefix) as name:
        yield name
        if request.node.get_closest_marker("in_use_teardown_expected") is None:
            assert workloads.in_use_teardowns(api, name) == []
