"""Secure metrics (`metrics.secure`): HTTPS with the webhook serving certificate, and only for bearer tokens the API
server authenticates (TokenReview) and allows to get /metrics (SubjectAccessReview through the chart's
`mnnvl-metrics-reader` ClusterRole)."""

from __future__ import annotations

import http.client
import urllib.error
from collections.abc import Iterator

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, testing

from . import workloads

GUARDIAN = keys.GUARDIAN_CONTROLLER
READER_ROLE = "mnnvl-metrics-reader"
SCRAPER = "scraper"
STRANGER = "stranger"


@pytest.fixture
def secure_guardian(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, lws_replicas: list[controllers.Replica]
) -> Iterator[controllers.Replica]:
    """mnnvl-guardian with secure metrics, two ServiceAccounts in `ns` (only `scraper` bound to the metrics-reader
    ClusterRole); the guardian as the session started it afterwards, since other tests read plain metrics."""
    for account in (SCRAPER, STRANGER):
        api.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}},
            "serviceaccounts",
        )
    binding = kube.path_of("rbac.authorization.k8s.io/v1", "clusterrolebindings", name=f"{ns}-{READER_ROLE}")
    api.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{ns}-{READER_ROLE}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SCRAPER, "namespace": ns}],
        },
        "clusterrolebindings",
    )
    try:
        [replica] = controllers.start(testbed, GUARDIAN, gate=True, extra_config={"metrics": {"secure": True}})
        yield replica
    finally:
        api.delete(binding)
        controllers.start(testbed, GUARDIAN, gate=True)


def refusal(replica: controllers.Replica, testbed: cluster.Testbed, token: str | None) -> int:
    with pytest.raises(urllib.error.HTTPError) as refused:
        workloads.replica_metrics(replica, ca=testbed.ca_cert, token=token)
    refused.value.close()  # the refusal holds the connection
    return refused.value.code


def test_metrics_are_served_only_to_a_token_allowed_to_get_them(
    ns: str, testbed: cluster.Testbed, secure_guardian: controllers.Replica
) -> None:
    """No token: 401; a ServiceAccount not bound to mnnvl-metrics-reader: 403; one bound to it: the metrics, over
    TLS that the testbed's CA (which signed the webhook certificate) verifies. Plain HTTP gets nothing."""
    replica = secure_guardian
    assert refusal(replica, testbed, token=None) == 401
    assert refusal(replica, testbed, token="not-a-token") == 401
    assert refusal(replica, testbed, token=cluster.service_account_token(testbed, ns, STRANGER)) == 403
    scraper = cluster.service_account_token(testbed, ns, SCRAPER)

    def served() -> str | None:
        try:
            return workloads.replica_metrics(replica, ca=testbed.ca_cert, token=scraper)
        except urllib.error.HTTPError as refused:
            refused.close()
            if refused.code != 403:  # the new binding may take the authorizer a moment to see; nothing else may fail
                raise
            return None

    body = testing.wait_for(served, what="the bound ServiceAccount to read the metrics", timeout=30)
    assert 'mnnvl_build_info{controller="mnnvl-guardian"' in body
    assert "mnnvl_lease_held" in body
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        workloads.replica_metrics(replica)
