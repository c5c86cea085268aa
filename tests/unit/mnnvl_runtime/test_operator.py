from __future__ import annotations

import pathlib

import kopf

from mnnvl_api import keys, models
from mnnvl_runtime import controller, identity, operator


def test_a_controller_without_webhooks_gets_no_webhook_server() -> None:
    """kopf starts a configured webhook server even with no webhook handler, and stops on its missing certificate
    files: mnnvl-topology, which the chart mounts no certificate, must not have one."""
    without = operator.kopf_settings(
        identity.Identity(keys.TOPOLOGY_CONTROLLER),
        models.Configuration(),
        certfile=None,
        keyfile=None,
        watch_selectors={},
    )
    assert without.admission.server is None
    with_certificate = operator.kopf_settings(
        identity.Identity(keys.LWS_CONTROLLER),
        models.Configuration(),
        certfile=pathlib.Path("tls.crt"),
        keyfile=pathlib.Path("tls.key"),
        watch_selectors={},
    )
    assert isinstance(with_certificate.admission.server, kopf.WebhookServer)


def test_each_resources_selectors_reach_kopfs_watches_of_that_resource_only() -> None:
    """One `WatchSelector` per resource carries both kinds of selector to kopf, which sends them on every list and
    watch of that resource; a kind left out is not sent at all."""
    live = "status.phase!=Failed,status.phase!=Succeeded"
    settings = operator.kopf_settings(
        identity.Identity(keys.TOPOLOGY_CONTROLLER),
        models.Configuration(),
        certfile=None,
        keyfile=None,
        watch_selectors={
            "pods": controller.WatchSelector(labels="example.com/scope", fields=live),
            ("example.com", "v1", "things"): controller.WatchSelector(labels="example.com/mine"),
            "nodes": controller.WatchSelector(fields="spec.unschedulable=false"),
        },
    )
    pods = kopf.Resource("", "v1", "pods", kind="Pod", namespaced=True)
    things = kopf.Resource("example.com", "v1", "things", kind="Thing")
    nodes = kopf.Resource("", "v1", "nodes", kind="Node")
    watching = settings.watching
    collected = {
        resource.plural: (watching.label_selectors.collect(resource), watching.field_selectors.collect(resource))
        for resource in (pods, things, nodes)
    }
    assert collected == {
        "pods": (["example.com/scope"], [live]),
        "things": (["example.com/mine"], []),
        "nodes": ([], ["spec.unschedulable=false"]),
    }
