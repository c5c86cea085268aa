"""Webhook TLS comes from certificate files (as cert-manager mounts them) and is reloaded when they change."""

from __future__ import annotations

import ssl

from mnnvl_api import keys
from mnnvl_runtime import certs, kube
from mnnvl_testbed import cluster, controllers, testing

from . import workloads


def test_a_rotated_serving_certificate_is_picked_up_without_a_restart(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, lws_replicas: list[controllers.Replica]
) -> None:
    """Rotating the certificate files changes what the webhook serves, and admission keeps working."""
    [replica] = lws_replicas
    served_before = ssl.get_server_certificate(("127.0.0.1", replica.webhook_port))
    cert_dir = testbed.state_dir / "controllers" / keys.LWS_CONTROLLER / "certs"
    ca = certs.KeyPair(testbed.ca_cert, testbed.state_dir / "pki" / "ca.key")
    rotated = certs.issue(
        ca, certs.KeyPair(cert_dir / "tls.crt", cert_dir / "tls.key"), common_name="rotated", hosts=("127.0.0.1",)
    )

    def serving_the_new_one() -> bool:
        try:
            served = ssl.get_server_certificate(("127.0.0.1", replica.webhook_port))
        except OSError:
            return False  # the server restarts on the new files
        return served != served_before and served.strip() == rotated.cert.read_text().strip()

    testing.wait_for(serving_the_new_one, what="the webhook to serve the rotated certificate", timeout=60)
    message = workloads.rejection(lambda: workloads.create_lws(api, ns, workloads.lws_manifest("after", opt_in="yes")))
    assert 'Unsupported value: "yes"' in message
    workloads.create_lws(api, ns, workloads.lws_manifest("fine", replicas=1, size=1))
    workloads.wait_groups_running(api, ns, "fine", replicas=1, size=1)
