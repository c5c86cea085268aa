from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from mnnvl_testbed import cluster, testing


@pytest.fixture(scope="session")
def testbed() -> cluster.Testbed:
    """The local control plane: reused when one is running, started (and left running) otherwise."""
    return testing.start_or_reuse()


@pytest.fixture(scope="session")
def api(testbed: cluster.Testbed) -> client.ApiClient:
    return testbed.api()


@pytest.fixture
def ns(api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of its own for each test."""
    prefix = request.node.name.replace("_", "-").lower().removeprefix("test-")
    with testing.namespace(api, prefix) as name:
        yield name
