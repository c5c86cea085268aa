from __future__ import annotations

import pathlib

import kopf

from mnnvl_api import keys, models
from mnnvl_runtime import identity, operator


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
