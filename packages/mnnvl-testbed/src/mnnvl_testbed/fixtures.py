"""pytest fixtures for tests on the testbed (a plugin: `pytest_plugins = ["mnnvl_testbed.fixtures"]`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mnnvl_runtime import kube

from . import cluster, testing


@pytest.fixture(scope="session")
def testbed() -> cluster.Testbed:
    """The local control plane: reused when one is running, started (and left running) otherwise."""
    return testing.start_or_reuse()


@pytest.fixture(scope="session")
def api(testbed: cluster.Testbed) -> kube.Kube:
    return testbed.api()


@pytest.fixture
def ns(api: kube.Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of its own for each test."""
    prefix = request.node.name.replace("_", "-").lower().removeprefix("test-")
    with testing.namespace(api, prefix) as name:
        yield name
