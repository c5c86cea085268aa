from __future__ import annotations

from collections.abc import Iterator

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, testing

from . import workloads


@pytest.fixture(scope="session")
def lws_controller(testbed: cluster.Testbed) -> list[controllers.Replica]:
    """mnnvl-lws and mnnvl-guardian from this source tree, gate enabled, webhooks registered."""
    controllers.start(testbed, keys.GUARDIAN_CONTROLLER, gate=True)
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
        if request.node.get_closest_marker("in_use_teardown_expected") is None:
            assert workloads.in_use_teardowns(api, name) == []
