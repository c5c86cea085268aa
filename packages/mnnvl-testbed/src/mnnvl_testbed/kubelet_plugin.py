"""A stand-in for the NVIDIA DRA driver's kubelet plugin on kwok's fake nodes, which run no kubelet.

It does the one thing of the plugin the rest of the testbed needs: it publishes, per fake node, a ResourceSlice
with one `channel-0` device carrying the attributes the driver's channel DeviceClass selects, so the real
scheduler allocates the real controller's channel claims with the real one-claim-per-node limit. It prepares no
claim and labels no node, so the controller's per-domain DaemonSets get no pods.
"""

from __future__ import annotations

from typing import Any

import kopf

from mnnvl_runtime import kube

from . import kopf_process, manifests

COMPONENT = "kubelet-plugin"
registry = kopf_process.registry(COMPONENT)


@kopf.on.event("nodes", labels={manifests.TESTBED_NODE_LABEL: "true"}, id="publish-channel", registry=registry)
def publish_channel(body: kopf.Body, type: str, **_: Any) -> None:
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        return  # the slice's ownerReference lets the garbage collector remove it
    try:
        kopf_process.api(COMPONENT).request(
            "POST",
            kube.path_of("resource.k8s.io/v1", "resourceslices"),
            body=manifests.channel_resource_slice(dict(body)),
        )
    except kube.ApiError as error:
        if error.status != 409:
            raise


if __name__ == "__main__":
    kopf_process.run(registry)
