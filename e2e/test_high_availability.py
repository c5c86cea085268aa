"""Any controller can run N replicas: webhooks are served by every replica; reconciliation by the Lease holder only."""

from __future__ import annotations

import json
import os
import signal
import ssl
import urllib.request
from collections.abc import Iterator

import pytest

from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, processes, testing

from . import workloads

LEASE_PATH = workloads.LWS_LEASE_PATH


@pytest.fixture
def two_replicas(
    testbed: cluster.Testbed, lws_controller: list[controllers.Replica]
) -> Iterator[list[controllers.Replica]]:
    yield controllers.start_lws(testbed, gate=True, replicas=2)
    controllers.start_lws(testbed, gate=True)


def review(replica: controllers.Replica, testbed: cluster.Testbed, lws: kube.Object) -> dict[str, object]:
    """Send an AdmissionReview straight to one replica's validating webhook, as the API server would."""
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "e2e-review",
            "kind": {"group": "leaderworkerset.x-k8s.io", "version": "v1", "kind": "LeaderWorkerSet"},
            "resource": {"group": "leaderworkerset.x-k8s.io", "version": "v1", "resource": "leaderworkersets"},
            "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": lws,
            "namespace": "default",
        },
    }
    context = ssl.create_default_context(cafile=str(testbed.ca_cert))
    request = urllib.request.Request(
        f"https://127.0.0.1:{replica.webhook_port}/validate-leaderworkerset",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        answer: dict[str, object] = json.loads(response.read())["response"]
        return answer


def test_only_the_lease_holder_reconciles_and_a_killed_holder_hands_over(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, two_replicas: list[controllers.Replica]
) -> None:
    """Reconciliation is done by the Lease holder only; when it dies, another replica takes over."""
    by_name = {r.name: r for r in two_replicas}
    holder = testing.wait_for(
        lambda: (
            api.request("GET", LEASE_PATH)["spec"].get("holderIdentity") in by_name
            and api.request("GET", LEASE_PATH)["spec"]["holderIdentity"]
        ),
        what="one replica holding the Lease",
        timeout=30,
    )
    follower = next(name for name in by_name if name != holder)
    testing.wait_for(lambda: workloads.lease_held(by_name[holder]), what="the holder to report it", timeout=30)
    assert workloads.metric(by_name[follower], "mnnvl_lease_held") == 0.0

    workloads.create_lws(api, ns, workloads.lws_manifest("first", replicas=1, size=1))
    workloads.wait_groups_running(api, ns, "first", replicas=1, size=1)
    # The webhook (whichever replica serves it) may create the domain at admission; only the holder reconciles.
    created = "mnnvl_compute_domains_created_total"
    replica_scope = {"scope": "replica"}

    def domains_made(replica: str) -> float:
        """The domains `replica` created, by reconciling or at admission."""
        made = (created, "mnnvl_compute_domains_created_at_admission_total")
        return sum(workloads.metric(by_name[replica], name, replica_scope) for name in made)

    assert sum(domains_made(name) for name in by_name) >= 1
    assert workloads.metric(by_name[follower], created, replica_scope) == 0

    # A crash, not a graceful exit: the Lease is not released and must expire.
    pid = processes.Supervisor(testbed.state_dir).pid(holder)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    controllers.point_webhooks_at(testbed, by_name[follower])  # what the webhook Service would do
    testing.wait_for(
        lambda: api.request("GET", LEASE_PATH)["spec"].get("holderIdentity") == follower,
        what=f"{follower} to take the Lease over",
        timeout=60,
    )
    workloads.create_lws(api, ns, workloads.lws_manifest("second", replicas=1, size=1))
    # Its group ran, so the new holder ungated it (only the Lease holder does); its webhook or its passes made the
    # domain.
    workloads.wait_groups_running(api, ns, "second", replicas=1, size=1)
    assert domains_made(follower) >= 1


def test_every_replica_serves_webhooks(testbed: cluster.Testbed, two_replicas: list[controllers.Replica]) -> None:
    """Webhooks are served by every replica, leader or not."""
    bad = workloads.lws_manifest("bad", opt_in="true")
    bad["metadata"]["namespace"] = "default"
    good = workloads.lws_manifest("good")
    good["metadata"]["namespace"] = "default"
    for replica in two_replicas:
        denied = review(replica, testbed, bad)
        assert denied["allowed"] is False
        assert 'Unsupported value: "true"' in str(denied["status"])
        assert review(replica, testbed, good)["allowed"] is True
