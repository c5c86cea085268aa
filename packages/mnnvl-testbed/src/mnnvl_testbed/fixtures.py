"""pytest fixtures for tests on a cluster (a plugin: `pytest_plugins = ["mnnvl_testbed.fixtures"]`).

`--backend testbed` (the default) runs them on the local control plane; `--backend kind` on a kind cluster
with mnnvl installed from its image and chart (`kind.py`; needs a container engine, and fails without one).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest
import pytest_kind

from mnnvl_runtime import kube

from . import building, cluster, image, kind, testing

ROOT = pathlib.Path(__file__).parents[4]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        choices=kind.BACKENDS,
        default=kind.TESTBED,
        help="where tests on a cluster run: the local testbed (default), or a kind cluster with mnnvl installed "
        "from its image and chart (needs docker, kind, kubectl and helm; docs/testing.md)",
    )
    parser.addoption(
        "--controllers-from-image",
        action="store_true",
        help="on the testbed, start mnnvl's controllers from the image built from this tree's Dockerfile (buildah, "
        "chroot isolation; docs/image.md) instead of as local processes",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "testbed: the test uses the testbed's own processes or files")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that need the testbed itself, so a kind run can deselect them openly (-m 'not testbed')."""
    for item in items:
        if "testbed" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.testbed)


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("backend"))


@pytest.fixture(scope="session")
def testbed(backend: str, request: pytest.FixtureRequest) -> cluster.Testbed:
    """The local control plane: reused when one is running, started (and left running) otherwise; with
    `--controllers-from-image`, the image built first."""
    if backend != kind.TESTBED:
        pytest.fail(kind.NEEDS_TESTBED, pytrace=False)
    started = testing.start_or_reuse()
    if request.config.getoption("controllers_from_image"):
        # Only the envs that build the image install uv (the version the Dockerfile names); this plugin is loaded
        # by every test run.
        import uv  # noqa: PLC0415

        # Read by `controllers.start` whenever a controller is (re)started, for the rest of the session.
        os.environ[image.CONTROLLER_IMAGE_VARIABLE] = image.build(ROOT, pathlib.Path(uv.find_uv_bin()))
    return started


@pytest.fixture(scope="session")
def kind_installation(backend: str, request: pytest.FixtureRequest) -> Iterator[kind.Installation]:
    """A kind cluster (pytest-kind-ng; --cluster-name, --keep-cluster, --kind-image) with mnnvl installed."""
    assert backend == kind.KIND, "only the kind backend installs mnnvl into a kind cluster"
    tools = kind.require_container_engine()
    name = str(request.config.getoption("cluster_name"))
    created = pytest_kind.KindCluster(
        name,
        image=request.config.getoption("kind_image") or kind.NODE_IMAGE,
        kind_path=pathlib.Path(tools["kind"]),
        kubectl_path=pathlib.Path(tools["kubectl"]),
    )
    created.create()
    installation = kind.install(
        tools,
        root=ROOT,
        kubeconfig=pathlib.Path(created.kubeconfig_path),
        name=name,
        state_dir=building.cache_root() / "kind" / name,
    )
    yield installation
    installation.stop()
    if not request.config.getoption("keep_cluster"):
        created.delete()


@pytest.fixture(scope="session")
def api(backend: str, request: pytest.FixtureRequest) -> kube.Kube:
    """A cluster-admin client of the backend's cluster."""
    if backend == kind.KIND:
        installation: kind.Installation = request.getfixturevalue("kind_installation")
        return installation.api()
    bed: cluster.Testbed = request.getfixturevalue("testbed")
    return bed.api()


@pytest.fixture
def ns(api: kube.Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of its own for each test."""
    prefix = request.node.name.replace("_", "-").lower().removeprefix("test-")
    with testing.namespace(api, prefix) as name:
        yield name
