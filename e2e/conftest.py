from __future__ import annotations

from collections.abc import Iterator

import pytest

from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, testing

from . import workloads


@pytest.fixture(scope="session")
def lws_controller(testbed: cluster.Testbed) -> list[controllers.Replica]:
    """mnnvl-lws from this source tree, with the AutoComputeDomain gate enabled and its webhooks registered."""
    return controllers.start_lws(testbed, gate=True)


@pytest.fixture
def lws_replicas(testbed: cluster.Testbed, lws_controller: list[controllers.Replica]) -> list[controllers.Replica]:
    """The mnnvl-lws replicas running now (tests may have restarted them since the session began)."""
    return controllers.running_replicas(testbed)


@pytest.fixture
def ns(api: kube.Kube, request: pytest.FixtureRequest, lws_controller: list[controllers.Replica]) -> Iterator[str]:
    """A namespace per test; afterwards, the DRA simulator must have recorded no teardown of an in-use domain."""
    prefix = request.node.name.replace("_", "-").lower().removeprefix("test-")
    with testing.namespace(api, prefix) as name:
        yield name
        assert workloads.in_use_teardowns(api, name) == []
