"""Every upstream version the testbed runs, pinned in this one place."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModuleFile:
    """A file of a Go module at a version, as the module proxy serves it."""

    module: str
    version: str
    path: str  # inside the module


@dataclasses.dataclass(frozen=True, kw_only=True)
class ThirdPartyFile:
    """An upstream file pinned by its sha256: read from the third-party directory (`MNNVL_TESTBED_THIRD_PARTY`)
    when that is set, else from the Go module that holds it."""

    path: str  # relative to the third-party directory
    sha256: str
    in_module: ModuleFile | None = None  # None: only the third-party directory has it


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceArchive:
    """A module's source as a `.tar.gz`, for when the Go module proxy refuses the module itself."""

    file: ThirdPartyFile
    top_directory: str | None  # the one directory the archive unpacks to; None: it unpacks into its root

    @property
    def name(self) -> str:
        """The archive's file name without `.tar.gz`: where it is unpacked in the cache."""
        return self.file.path.rsplit("/", 1)[-1].removesuffix(".tar.gz")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NestedModule:
    """A module inside another's repository that the outer module's go.mod replaces with its directory. A module zip
    leaves nested modules out, so a tree from the module proxy gets each from the proxy on its own."""

    module: str
    directory: str  # in the repository (and in the source archive, which unpacks the repository's layout)
    version: str  # the version the proxy serves with the same files as that directory


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
    # Where the third-party directory is named it overrides the proxy: the tool is built from this archive.
    source_archive: SourceArchive | None = None
    # The version the proxy serves `version` as, when they differ: a tag whose major version the module path lacks is
    # served only as a pseudo-version of its commit. `version` names the release (and the binary in the cache).
    module_version: str = ""
    # Built as the main module of its own tree, so that its go.mod's `replace` directives hold (with its vendor
    # directory when an unpacked archive has one), rather than as a dependency of a wrapper module.
    own_module: bool = False
    # Never from the module proxy, only from its source archive (built in its own module): for a release no proxy
    # serves.
    archive_only: bool = False
    module_directory: str = ""  # where in the archive the tool's go.mod is, when not at its root
    nested_modules: tuple[NestedModule, ...] = ()
    # Dependencies that proxies refusing the tool refuse too: where the tool comes from its archive, each module is
    # replaced by its own unpacked archive (in a copy of the tool's go.mod, the archive's own left as it is).
    replaced_by_archives: tuple[tuple[str, SourceArchive], ...] = ()

    def __post_init__(self) -> None:
        if self.archive_only and self.source_archive is None:
            raise ValueError(f"{self.name} is archive-only but names no source archive")

    @property
    def served_version(self) -> str:
        """The version to ask the module proxy for."""
        return self.module_version or self.version


def _unpacked_at_root(path: str, sha256: str) -> SourceArchive:
    """A source archive of the third-party directory whose tree is its root (no top-level folder)."""
    return SourceArchive(file=ThirdPartyFile(path=path, sha256=sha256), top_directory=None)


def _commands(
    prefix: str,
    module: str,
    version: str,
    archive: SourceArchive,
    commands: tuple[str, ...],
    *,
    nested_modules: tuple[NestedModule, ...] = (),
) -> tuple[GoTool, ...]:
    """A tool `<prefix>-<command>` for each `cmd/<command>` of `module`; built in its own module where its go.mod
    replaces nested modules with their directories."""
    return tuple(
        GoTool(
            name=f"{prefix}-{command}",
            module=module,
            version=version,
            package=f"{module}/cmd/{command}",
            source_archive=archive,
            own_module=bool(nested_modules),
            nested_modules=nested_modules,
        )
        for command in commands
    )


KUBERNETES_VERSION = "v1.36.3"
KUBERNETES_MINOR = KUBERNETES_VERSION.split(".")[1]
STAGING_VERSION = "v0." + KUBERNETES_VERSION.removeprefix("v1.")
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
# v0.10.0 is the first release whose DisaggregatedSet has `spec.slices` and `spec.placementPolicy`. Some module
# proxies refuse it (403) while serving all its dependencies; then it is built from its source archive.
LWS_VERSION = "v0.10.0"
LWS_SOURCE_ARCHIVE = SourceArchive(
    file=ThirdPartyFile(
        path=f"lws-{LWS_VERSION}-src.tar.gz",
        sha256="88e76b33e0891784f588fa21e00d70d516ef39891cc7d906808ae2571e650ea6",
    ),
    top_directory=f"lws-{LWS_VERSION}",
)

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
    source_archive=LWS_SOURCE_ARCHIVE,
)

# NVIDIA's DRA driver for GPUs: its ComputeDomain controller runs on the testbed, with its chart's RBAC, DeviceClasses
# and Deployment. Its tags (v25.12.0) carry a major version its module path lacks, so a module proxy serves the
# release only as a pseudo-version of the tag's commit 0882da8720c2 (committed 2026-02-12T10:56:49Z). The source
# archive vendors every dependency; a module zip keeps only vendor/modules.txt, so a tree from the proxy is built
# with its dependencies from the proxy.
DRA_DRIVER_VERSION = "v25.12.0"
DRA_DRIVER_SOURCE_ARCHIVE = _unpacked_at_root(
    f"dra-driver-gpu-{DRA_DRIVER_VERSION}-src.tar.gz",
    "d60334404d7cfb2bc48c4073f68fb81ed1fde1de5a706180b33be60e26fe977c",
)
DRA_DRIVER_MODULE = "github.com/NVIDIA/k8s-dra-driver-gpu"
DRA_DRIVER_MODULE_VERSION = "v0.0.0-20260212105649-0882da8720c2"
COMPUTE_DOMAIN_CONTROLLER = GoTool(
    name="compute-domain-controller",
    module=DRA_DRIVER_MODULE,
    version=DRA_DRIVER_VERSION,
    package=f"{DRA_DRIVER_MODULE}/cmd/compute-domain-controller",
    # What the driver's Makefile sets; without it the controller refuses to start (no version to report).
    ldflags=(f"-X {DRA_DRIVER_MODULE}/internal/info.version={DRA_DRIVER_VERSION}",),
    source_archive=DRA_DRIVER_SOURCE_ARCHIVE,
    module_version=DRA_DRIVER_MODULE_VERSION,
    own_module=True,
)
# KAI Scheduler at the release NVCF pins: its scheduler, binder, podgrouper and two status controllers run on the
# testbed for the tests that ask for it (`kai.ensure_running`). Proxies that refuse the module (403) still serve its
# dependencies; then it is built from its source archive, unpacked at its root.
KAI_VERSION = "v0.16.7"
KAI_MODULE = "github.com/kai-scheduler/KAI-scheduler"
KAI_SOURCE_ARCHIVE = _unpacked_at_root(
    f"kai-scheduler-{KAI_VERSION}-src.tar.gz", "82a60317cad30d8f1d28009a9d2363bb5fbbf5c8e90df9d34194c71548cd0ff9"
)
KAI_TOOLS = _commands(
    "kai",
    KAI_MODULE,
    KAI_VERSION,
    KAI_SOURCE_ARCHIVE,
    ("scheduler", "binder", "podgrouper", "podgroupcontroller", "queuecontroller"),
)
#: Inside KAI's archive: its CRDs.
KAI_CRDS = "deployments/kai-scheduler/crds"

# Volcano at the release the seed's "LeaderWorkerSet + Volcano" path installs: its scheduler and controller manager
# run for the tests that ask for it (`volcano.ensure_running`), built in its own module for the versions its go.mod
# pins with `replace`. That go.mod replaces its API module (required at v1.15.1, a tag volcano-sh/apis lacks) with
# its staging directory; volcano.sh/apis v1.15.0 holds the same files as that directory at v1.15.1.
VOLCANO_VERSION = "v1.15.1"
VOLCANO_MODULE = "volcano.sh/volcano"
VOLCANO_TOOLS = _commands(
    "volcano",
    VOLCANO_MODULE,
    VOLCANO_VERSION,
    _unpacked_at_root(
        f"volcano-{VOLCANO_VERSION}-src.tar.gz", "7ed4a2819384fda0dda74a2bb0d27b5382376a14478c1ca838071df4b768efbb"
    ),
    ("scheduler", "controller-manager"),
    nested_modules=(
        NestedModule(module="volcano.sh/apis", directory="staging/src/volcano.sh/apis", version="v1.15.0"),
    ),
)

# The Grove operator at the release NVCF pins (tag operator/v0.1.0-alpha.11), built in its own module, whose go.mod
# replaces its two API modules with their directories (each tagged `<directory>/v0.1.0-alpha.11` at the same commit).
# It requires KAI v0.15.2 and Volcano's API module v1.14.1, which proxies refusing it refuse too: built from its
# archive, it gets each from that module's own source archive.
GROVE_VERSION = "v0.1.0-alpha.11"
GROVE_API_MODULE = "github.com/ai-dynamo/grove/operator/api"
GROVE_SCHEDULER_API_MODULE = "github.com/ai-dynamo/grove/scheduler/api"
GROVE_OPERATOR = GoTool(
    name="grove-operator",
    module="github.com/ai-dynamo/grove/operator",
    version=GROVE_VERSION,
    package="github.com/ai-dynamo/grove/operator/cmd",
    source_archive=_unpacked_at_root(
        f"grove-{GROVE_VERSION}-src.tar.gz", "3a9fa431617bba0878333326487267c2f164be043d97c878e5bb958370dbf2bc"
    ),
    own_module=True,
    module_directory="operator",
    nested_modules=(
        NestedModule(module=GROVE_API_MODULE, directory="operator/api", version=GROVE_VERSION),
        NestedModule(module=GROVE_SCHEDULER_API_MODULE, directory="scheduler/api", version=GROVE_VERSION),
    ),
    replaced_by_archives=(
        (
            KAI_MODULE,
            _unpacked_at_root(
                "kai-scheduler-v0.15.2-src.tar.gz", "6162925172adc27f64b45fde1ff4ee3305b7467647add2294f2b034ed67b6c7d"
            ),
        ),
        (
            "volcano.sh/apis",
            _unpacked_at_root(
                "volcano-apis-v1.14.1-src.tar.gz", "9fc168fcdc96ad593ebc4eb1223ae12b5c99429902f53e502a3c4172ab1faff8"
            ),
        ),
    ),
)

#: Inside the driver's archive: its Helm chart (RBAC, DeviceClasses, the controller's Deployment, the
#: ComputeDomainClique CRD) and the templates the controller reads from `/templates`.
DRA_DRIVER_CHART = "deployments/helm/nvidia-dra-driver-gpu"
DRA_DRIVER_TEMPLATES = "templates"


# The chart's tools: rendering, offline schema validation, and the kustomize tree the chart is checked against.
HELM_VERSION = "v3.22.0"
KUBECONFORM_VERSION = "v0.8.0"
KUSTOMIZE_VERSION = "v5.8.2"  # v5.8.3 needs go 1.27; the testbed builds with Go 1.26
HELM = GoTool(
    name="helm",
    module="helm.sh/helm/v3",
    version=HELM_VERSION,
    package="helm.sh/helm/v3/cmd/helm",
    # The Kubernetes version helm assumes without a cluster (`helm template`, `helm lint`): its client-go's, as
    # helm's Makefile sets it; unset, helm assumes v1.20 and refuses the chart's kubeVersion.
    ldflags=(
        f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37",
    ),
)
KUBECONFORM = GoTool(
    name="kubeconform",
    module="github.com/yannh/kubeconform",
    version=KUBECONFORM_VERSION,
    package="github.com/yannh/kubeconform/cmd/kubeconform",
)
KUSTOMIZE = GoTool(
    name="kustomize",
    module="sigs.k8s.io/kustomize/kustomize/v5",
    version=KUSTOMIZE_VERSION,
    package="sigs.k8s.io/kustomize/kustomize/v5",
)
CHART_TOOLS = (HELM, KUBECONFORM, KUSTOMIZE)

#: What a testbed runs; helm renders the DRA driver's chart.
ALL_TOOLS = (
    ETCD,
    KUBE_APISERVER,
    KUBE_CONTROLLER_MANAGER,
    KUBE_SCHEDULER,
    KWOK,
    LWS_MANAGER,
    COMPUTE_DOMAIN_CONTROLLER,
    HELM,
)
#: The Kubernetes release whose built-in schemas (from the `kubernetes-validate` package) the chart is checked against.
CHART_SCHEMAS_KUBERNETES = "1.36.0"


#: Every binary a test may use: the testbed's, KAI's, Volcano's and Grove's (each started for its tests only) and
#: the chart tests' tools.
EVERY_TOOL = (
    *ALL_TOOLS,
    *(tool for tool in CHART_TOOLS if tool not in ALL_TOOLS),
    *KAI_TOOLS,
    *VOLCANO_TOOLS,
    GROVE_OPERATOR,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CrdModule:
    """CRDs the chart renders objects of, read from a Go module (downloaded through the module proxy)."""

    module: str
    version: str
    directory: str  # inside the module, holding plain CRD YAML files


CHART_CRD_MODULES = (
    CrdModule(module="github.com/cert-manager/cert-manager", version="v1.19.2", directory="deploy/crds"),
    CrdModule(
        module="github.com/prometheus-operator/prometheus-operator",
        version="v0.85.0",
        directory="example/prometheus-operator-crd",
    ),
)

# Upstream CRDs, installed byte for byte from their modules or the third-party directory (never copied into this
# repository); a file's pin is the same wherever it comes from.


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComputeDomainCrd:
    """The NVIDIA DRA driver's ComputeDomain CRD at one release."""

    file: ThirdPartyFile
    num_nodes_required: bool  # `spec.numNodes` is required up to v25.12.0, optional (default 0) after


@dataclasses.dataclass(frozen=True, kw_only=True)
class TopologyCrds:
    """KAI's Topology CRD at one release, with Grove's ClusterTopologyBinding CRD."""

    kai_topology: ThirdPartyFile
    editable_aliases: bool  # from KAI v0.17.0, levels have an `alias` and only the nodeLabel sequence is immutable
    grove_binding: ThirdPartyFile


COMPUTE_DOMAIN_CRDS = {
    "main-22407113": ComputeDomainCrd(
        file=ThirdPartyFile(
            path="crds/dra-driver-gpu-main-22407113/resource.nvidia.com_computedomains.yaml",
            sha256="653b477ad084f6cfed479ecdcc1149f3c14499bcac2ae1d2acbb82ccf7419f89",
            # Commit 22407113785e of the driver's main branch, committed 2026-05-15T15:02:33Z, whose go.mod names the
            # module sigs.k8s.io/dra-driver-nvidia-gpu (the repository's new home, kubernetes-sigs).
            in_module=ModuleFile(
                module="sigs.k8s.io/dra-driver-nvidia-gpu",
                version="v0.0.0-20260515150233-22407113785e",
                path="deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml",
            ),
        ),
        num_nodes_required=False,
    ),
    "v25.12.0": ComputeDomainCrd(
        file=ThirdPartyFile(
            path="crds/dra-driver-gpu-v25.12.0/resource.nvidia.com_computedomains.yaml",
            sha256="9345244a663bd1b05551dee3e3749e0fc8a4aca4ff46e48308f7b5053c90d265",
            in_module=ModuleFile(
                module=DRA_DRIVER_MODULE,
                version=DRA_DRIVER_MODULE_VERSION,
                path=f"{DRA_DRIVER_CHART}/crds/resource.nvidia.com_computedomains.yaml",
            ),
        ),
        num_nodes_required=True,
    ),
}
COMPUTE_DOMAIN_CRD = "main-22407113"  # the driver's main branch, as v0.4.0+
LEGACY_COMPUTE_DOMAIN_CRD = "v25.12.0"

GROVE_BINDING_CRD = ThirdPartyFile(
    path="crds/grove-v0.1.0-alpha.11/grove.io_clustertopologybindings.yaml",
    sha256="917792ec71a94dc3f87e220961852c7fd192f25bb50cbc8226933cb55f30f16a",
    in_module=ModuleFile(
        module=GROVE_API_MODULE,
        version=GROVE_VERSION,
        path="core/v1alpha1/crds/grove.io_clustertopologybindings.yaml",
    ),
)
#: `--topology-crds` choices. NVCF pins KAI v0.16.7 and Grove v0.1.0-alpha.11.
TOPOLOGY_CRDS = {
    "kai-v0.16.7": TopologyCrds(
        kai_topology=ThirdPartyFile(
            path="crds/kai-scheduler-v0.16.7/kai.scheduler_topologies.yaml",
            sha256="3db3987c3e9fa08e268764219c9b805867ed812e139c1547329ed24ce6870d45",
            in_module=ModuleFile(
                module=KAI_MODULE, version="v0.16.7", path=f"{KAI_CRDS}/kai.scheduler_topologies.yaml"
            ),
        ),
        editable_aliases=False,
        grove_binding=GROVE_BINDING_CRD,
    ),
    "kai-v0.17.0": TopologyCrds(
        kai_topology=ThirdPartyFile(
            path="crds/kai-scheduler-v0.17.0/kai.scheduler_topologies.yaml",
            sha256="bd985987aab8737d13c363a15762d6e66f3248db80a5088c8372108cce1150eb",
            in_module=ModuleFile(
                module=KAI_MODULE, version="v0.17.0", path=f"{KAI_CRDS}/kai.scheduler_topologies.yaml"
            ),
        ),
        editable_aliases=True,
        grove_binding=GROVE_BINDING_CRD,
    ),
}


def component_versions() -> dict[str, str]:
    """What a running testbed records, so a testbed started from older pins is restarted, never reused."""
    return {tool.name: tool.version for tool in ALL_TOOLS}
