"""Each controller's watches reach the API server with the label and field selectors its stores declare
(`mnnvl_runtime.watches`): objects no handler would accept are never sent. Top-level: it reads every controller."""

from __future__ import annotations

import pathlib

import kopf
import pytest

from mnnvl_api import keys, models
from mnnvl_ds import scope as ds_scope
from mnnvl_guardian import handlers as guardian_handlers
from mnnvl_lws import scope as lws_scope
from mnnvl_runtime import controller, identity, operator
from mnnvl_topology import handlers as topology_handlers
from mnnvl_topology import state as topology_state

PODS = kopf.Resource("", "v1", "pods", kind="Pod", namespaced=True)
COMPUTE_DOMAINS = kopf.Resource(
    keys.COMPUTE_DOMAIN_GROUP, keys.COMPUTE_DOMAIN_VERSION, keys.COMPUTE_DOMAIN_PLURAL, kind="ComputeDomain"
)
LEADER_WORKER_SETS = kopf.Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", kind="LeaderWorkerSet")
CONTROLLER_REVISIONS = kopf.Resource("apps", "v1", "controllerrevisions", kind="ControllerRevision")
NODES = kopf.Resource("", "v1", "nodes", kind="Node")
TOPOLOGIES = kopf.Resource(keys.KAI_TOPOLOGY_GROUP, "v1alpha1", keys.KAI_TOPOLOGY_PLURAL, kind="Topology")
MANAGED = f"{keys.MANAGED_BY_LABEL} in ({keys.DS_CONTROLLER},{keys.LWS_CONTROLLER})"
LWS, DS = lws_scope.CONTROLLER.watch_selectors, ds_scope.CONTROLLER.watch_selectors
GUARDIAN, TOPOLOGY = guardian_handlers.WATCH_SELECTORS, topology_handlers.WATCH_SELECTORS


def watch_selectors(selectors: controller.WatchSelectors) -> kopf.OperatorSettings:
    return operator.kopf_settings(
        identity.Identity(keys.LWS_CONTROLLER),
        models.Configuration(),
        certfile=pathlib.Path("tls.crt"),
        keyfile=pathlib.Path("tls.key"),
        watch_selectors=selectors,
    )


@pytest.mark.parametrize(
    ("selectors", "resource", "labels", "fields"),
    [
        pytest.param(LWS, PODS, [keys.SCOPE_LABEL], [], id="lws-pods"),
        pytest.param(LWS, COMPUTE_DOMAINS, [], [], id="lws-sees-every-domain"),
        pytest.param(LWS, LEADER_WORKER_SETS, [], [], id="lws-workloads"),
        pytest.param(
            LWS, CONTROLLER_REVISIONS, [keys.LWS_TEMPLATE_REVISION_HASH_LABEL], [], id="lws-template-revisions"
        ),
        pytest.param(DS, PODS, [f"{keys.SCOPE_LABEL}={keys.SCOPE_SLICE}"], [], id="ds-pods"),
        pytest.param(DS, LEADER_WORKER_SETS, [keys.DS_NAME_LABEL], [], id="ds-children"),
        pytest.param(DS, COMPUTE_DOMAINS, [], [], id="ds-sees-every-domain"),
        pytest.param(GUARDIAN, PODS, [keys.SCOPE_LABEL], [], id="guardian-pods"),
        pytest.param(GUARDIAN, COMPUTE_DOMAINS, [MANAGED], [], id="guardian-managed-domains"),
        # No label selects the pods the census and the fit check need (GPU pods, pods of hand-made domains); the
        # finished ones are left out.
        pytest.param(TOPOLOGY, PODS, [], [topology_state.POD_FIELD_SELECTOR], id="topology-non-terminal-pods"),
        pytest.param(TOPOLOGY, NODES, [], [], id="topology-sees-every-node"),
        pytest.param(TOPOLOGY, COMPUTE_DOMAINS, [], [], id="topology-sees-every-domain"),
        pytest.param(TOPOLOGY, TOPOLOGIES, [], [], id="topology-sees-every-topology"),
    ],
)
def test_the_api_server_filters_what_each_controller_watches(
    selectors: controller.WatchSelectors, resource: kopf.Resource, labels: list[str], fields: list[str]
) -> None:
    """The selectors reach kopf's watch requests for exactly the resources they name."""
    watching = watch_selectors(selectors).watching
    assert (watching.label_selectors.collect(resource), watching.field_selectors.collect(resource)) == (labels, fields)
