"""The guardian's protection write, against the in-memory API server."""

from __future__ import annotations

import asyncio

import pytest

from mnnvl_api import keys, names
from mnnvl_guardian import executor as guardian_executor
from mnnvl_runtime import domain_writer, kube

from ..mnnvl_runtime.memory_api import MemoryApi

NS = "serving"
NAME = "dsr1-0-bbbbb"


def domain_manifest() -> dict[str, object]:
    """A domain mnnvl-lws made, with no finalizer yet."""
    labels = {keys.OWNER_UID_LABEL: "uid-dsr1", keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER}
    return {
        "metadata": {"name": NAME, "namespace": NS, "labels": labels},
        "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(NAME)}}},
    }


def test_the_guardian_adds_its_finalizer_only_to_the_version_it_read() -> None:
    """A finalizer another controller adds meanwhile is never replaced: the patch is tested on resourceVersion."""
    api = MemoryApi()
    read = api.put(keys.COMPUTE_DOMAIN_PLURAL, domain_manifest(), manager=keys.LWS_CONTROLLER)
    patch = guardian_executor.protection_patch(read)
    assert patch is not None
    api.update(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME, lambda b: b["metadata"].__setitem__("finalizers", ["other/one"]))
    client = api.client(keys.GUARDIAN_CONTROLLER)
    with pytest.raises(kube.ApiError) as refused:
        asyncio.run(client.apatch(domain_writer.domain_path(NS, NAME), patch, content_type=kube.JSON_PATCH))
    assert refused.value.status == 422
    path = domain_writer.domain_path(NS, NAME)
    asyncio.run(client.amodify(path, guardian_executor.protection_patch))
    found = api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
    assert found is not None
    assert found["metadata"]["finalizers"] == ["other/one", keys.PROTECTION_FINALIZER]
