"""Every upstream version the testbed runs, pinned in this one place."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class GoTool:
    """A binary built from a Go module inside a throw-away wrapper module."""

    name: str
    module: str
    version: str
    package: str
    ldflags: tuple[str, ...] = ()
    main_source: str | None = None  # a wrapper main.go for modules without a usable main package
    replace_staging_of: str | None = None  # k8s.io/kubernetes needs its staging modules pinned


KUBERNETES_VERSION = "v1.36.3"
KUBERNETES_MINOR = KUBERNETES_VERSION.split(".")[1]
STAGING_VERSION = "v0." + KUBERNETES_VERSION.removeprefix("v1.")
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
# v0.10.0 is not served by the Go module proxy here (403); v0.9.0 serves both
# leaderworkerset.x-k8s.io/v1 and disaggregatedset.x-k8s.io/v1.
LWS_VERSION = "v0.9.0"

_COMPONENT_BASE_VERSION = "k8s.io/component-base/version"
_KUBERNETES_LDFLAGS = (
    f"-X {_COMPONENT_BASE_VERSION}.gitVersion={KUBERNETES_VERSION}",
    f"-X {_COMPONENT_BASE_VERSION}.gitMajor=1",
    f"-X {_COMPONENT_BASE_VERSION}.gitMinor={KUBERNETES_MINOR}",
    f"-X {_COMPONENT_BASE_VERSION}.gitTreeState=clean",
    f"-X {_COMPONENT_BASE_VERSION}.buildDate=1970-01-01T00:00:00Z",
)

_ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


def _kubernetes_tool(name: str) -> GoTool:
    return GoTool(
        name=name,
        module="k8s.io/kubernetes",
        version=KUBERNETES_VERSION,
        package=f"k8s.io/kubernetes/cmd/{name}",
        ldflags=_KUBERNETES_LDFLAGS,
        replace_staging_of="k8s.io/kubernetes",
    )


KUBE_APISERVER = _kubernetes_tool("kube-apiserver")
KUBE_CONTROLLER_MANAGER = _kubernetes_tool("kube-controller-manager")
KUBE_SCHEDULER = _kubernetes_tool("kube-scheduler")
ETCD = GoTool(
    name="etcd",
    module="go.etcd.io/etcd/server/v3",
    version=ETCD_VERSION,
    package=".",
    main_source=_ETCD_MAIN,
)
KWOK = GoTool(name="kwok", module="sigs.k8s.io/kwok", version=KWOK_VERSION, package="sigs.k8s.io/kwok/cmd/kwok")
LWS_MANAGER = GoTool(
    name="lws-manager",
    module="sigs.k8s.io/lws",
    version=LWS_VERSION,
    package="sigs.k8s.io/lws/cmd",
    ldflags=(f"-X sigs.k8s.io/lws/pkg/version.GitVersion={LWS_VERSION}",),
)

ALL_TOOLS = (ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK, LWS_MANAGER)
