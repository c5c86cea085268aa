"""What the testbed's own kopf processes share (the kubelet plugin stand-in, the teardown witness): a registry that
logs in with `$KUBECONFIG` and keeps its own annotation prefix, one API client, and how such a process is run."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import pathlib
import sys
from typing import Any

import kopf

from mnnvl_runtime import kube


def registry(component: str) -> kopf.OperatorRegistry:
    """A registry for `component` (a DNS label): logs in from the kubeconfig, posts no Events of its own."""
    made = kopf.OperatorRegistry()
    prefix = f"{component}.testbed.mnnvl"

    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False
        settings.persistence.finalizer = f"{prefix}/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=prefix)
        settings.watching.server_timeout = 120
        settings.watching.client_timeout = 150

    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_kubeconfig(**kwargs)

    kopf.on.startup(registry=made)(configure)
    kopf.on.login(registry=made)(login)
    return made


@functools.cache
def api(component: str) -> kube.Kube:
    """The process's API client, its field manager named after `component`."""
    return kube.Kube(
        kube.load_api_client(pathlib.Path(os.environ["KUBECONFIG"])), field_manager=f"mnnvl-testbed-{component}"
    )


def command(module: str, kubeconfig: pathlib.Path) -> tuple[list[str], dict[str, str]]:
    """How the process of `module` runs against the cluster `kubeconfig` reaches: (command, environment)."""
    return [sys.executable, "-m", module], {"KUBECONFIG": str(kubeconfig)}


def run(registry: kopf.OperatorRegistry) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(kopf.operator(registry=registry, standalone=True, clusterwide=True))
