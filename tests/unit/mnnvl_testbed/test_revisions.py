"""The port of upstream LWS v0.10.0's revision hashing. Expected values were produced by upstream's own Go
functions (`getPatch`, `hashRevision`, `ComputeRevision`, `resource.Quantity` JSON) on the same inputs; the e2e
test e2e/test_revision_hashes.py checks the golden shapes against a running upstream."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_testbed import revisions


def _lws(template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"kind": "LeaderWorkerSet", "metadata": {"name": "x"}, "spec": {"leaderWorkerTemplate": template, **spec}}


BUSYBOX = {"name": "main", "image": "busybox"}


def test_go_zero_values_and_defaults_are_hashed() -> None:
    lws = _lws({"workerTemplate": {"spec": {"containers": [BUSYBOX]}}})
    assert revisions.revision_patch(lws) == (
        b'{"spec":{"leaderWorkerTemplate":{"$patch":"replace","restartPolicy":"RecreateGroupOnPodRestart","size":1,'
        b'"workerTemplate":{"metadata":{},"spec":{"containers":[{"image":"busybox","name":"main","resources":{}}]}}},'
        b'"networkConfig":{"$patch":"replace","subdomainPolicy":"Shared"}}}'
    )
    assert revisions.template_revision_hash(lws) == "79c7c5fb54"


def test_escapes_canonical_quantities_and_webhook_defaults() -> None:
    container = {
        **BUSYBOX,
        "ports": [{"containerPort": 80}],
        "resources": {"requests": {"memory": "1.5Gi", "cpu": "0.25"}},
    }
    template = {
        "size": 3,
        "restartPolicy": "Default",
        "workerTemplate": {
            "metadata": {"annotations": {"note": "a<b && c>d — ünïcode"}},
            "spec": {"containers": [container]},
        },
    }
    lws = _lws(template, networkConfig={"subdomainPolicy": "UniquePerReplica"}, replicas=3)
    patch = revisions.revision_patch(lws).decode()
    assert '"note":"a\\u003cb \\u0026\\u0026 c\\u003ed — ünïcode"' in patch
    assert '"requests":{"cpu":"250m","memory":"1536Mi"}' in patch
    assert '"restartPolicy":"None"' in patch
    assert revisions.template_revision_hash(lws) == "567889fc6f"


def test_replicas_and_rollout_are_not_hashed() -> None:
    lws = _lws({"workerTemplate": {"spec": {"containers": [BUSYBOX]}}})
    rolled = _lws(
        {"workerTemplate": {"spec": {"containers": [BUSYBOX]}}},
        replicas=7,
        rolloutStrategy={"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 1}},
    )
    assert revisions.template_revision_hash(rolled) == revisions.template_revision_hash(lws)


def test_ds_revision_keeps_go_field_order() -> None:
    ds = {
        "metadata": {"name": "d"},
        "spec": {
            "roles": [
                {
                    "name": "a",
                    "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [BUSYBOX]}}}},
                },
                {
                    "name": "b",
                    "spec": {
                        "leaderWorkerTemplate": {
                            "size": 2,
                            "workerTemplate": {
                                "metadata": {"labels": {"x": "<y>"}},
                                "spec": {"containers": [{**BUSYBOX, "ports": [{"containerPort": 80}]}]},
                            },
                        }
                    },
                },
            ]
        },
    }
    assert revisions.ds_revision(ds) == "ed247156"


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("1024Mi", "1Gi"),
        ("1000m", "1"),
        ("0.5", "500m"),
        ("1.5Gi", "1536Mi"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("2048", "2048"),
        ("1536Mi", "1536Mi"),
        ("100m", "100m"),
        ("0", "0"),
        (4, "4"),
    ],
)
def test_quantities_are_canonical(written: str | int, canonical: str) -> None:
    assert revisions.canonical_quantity(written) == canonical


def test_fnv32_is_fnv1_not_fnv1a() -> None:
    assert revisions.fnv32(b"") == 2166136261
    assert revisions.fnv32(b"a") == 0x050C5D7E


@pytest.mark.parametrize(
    "container",
    [
        {**BUSYBOX, "securityContext": {"privileged": True}},
        {**BUSYBOX, "resources": {"limits": {"cpu": "1e3"}}},
        {**BUSYBOX, "ports": [{"containerPort": "80"}]},
    ],
    ids=["unmodelled-field", "exponent-quantity", "string-port"],
)
def test_what_is_not_modelled_is_refused(container: dict[str, Any]) -> None:
    with pytest.raises(revisions.NotModelledError):
        revisions.template_revision_hash(_lws({"workerTemplate": {"spec": {"containers": [container]}}}))
