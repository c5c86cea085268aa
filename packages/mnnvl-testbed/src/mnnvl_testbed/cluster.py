"""Bringing the local control plane up and down.

Order: etcd → kube-apiserver → CRDs and DRA objects → kube-controller-manager, kube-scheduler, kwok →
fake nodes → teardown witness, kubelet plugin stand-in, NVIDIA's ComputeDomain controller → upstream LWS manager
and its webhooks. Every component runs
as a detached process; `state.json` in the state dir records ports, paths, the component versions, the
clique size and the CRD releases, so later commands and test sessions reuse a running testbed.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import yaml

from mnnvl_api import keys
from mnnvl_runtime import certs, kube

from . import building, crds, dra_driver, image, kubelet_plugin, manifests, processes, thirdparty, versions, waiting

DEFAULT_NODES = 8
FIELD_MANAGER = "mnnvl-testbed"
SERVICE_CIDR = "10.96.0.0/16"
# The order components are stopped in is the reverse of this.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    *dra_driver.PARTS,
    "lws-manager",
)


#: What the API server audits, for `./dev bench writes`: metadata only, of writes to the objects mnnvl and LWS
#: write (pods, their status, ComputeDomains, Events), so the log stays small and cheap to write.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create", "update", "patch", "delete", "deletecollection"],
            "resources": [
                {"group": "", "resources": ["pods", "pods/status", "events"]},
                {"group": "events.k8s.io", "resources": ["events"]},
                {"group": keys.COMPUTE_DOMAIN_GROUP, "resources": [keys.COMPUTE_DOMAIN_PLURAL]},
            ],
        },
        {"level": "None"},
    ],
}


def audit_log(state_dir: pathlib.Path) -> pathlib.Path:
    """The API server's audit log (JSON lines, one per audited write)."""
    return state_dir / "logs" / "audit.log"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Profile:
    """A shape of fake cluster: how many nodes, and how many share an NVLink clique."""

    nodes: int
    nodes_per_clique: int


PROFILES = {
    "default": Profile(nodes=DEFAULT_NODES, nodes_per_clique=manifests.NODES_PER_CLIQUE),
    # Two GB200 NVL72 racks.
    "nvl72": Profile(nodes=2 * manifests.NVL72_NODES_PER_CLIQUE, nodes_per_clique=manifests.NVL72_NODES_PER_CLIQUE),
}


class TestbedError(RuntimeError):
    """A running testbed cannot become what was asked for (the message says why and what to do)."""


def default_state_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("MNNVL_TESTBED_STATE", building.cache_root() / "state"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Testbed:
    """A running testbed, as recorded in `state.json`."""

    state_dir: pathlib.Path
    kubeconfig: pathlib.Path
    ca_cert: pathlib.Path
    ports: dict[str, int]
    nodes: int
    nodes_per_clique: int = manifests.NODES_PER_CLIQUE
    computedomain_crd: str = versions.COMPUTE_DOMAIN_CRD
    topology_crds: str | None = None
    #: Tool name → version it was started with (empty for a testbed recorded before versions were).
    components: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The values of the DRA driver's chart its controller runs with, besides the testbed's own
    #: (`dra_driver.chart_values`).
    driver_values: tuple[str, ...] = ()

    @classmethod
    def load(cls, state_dir: pathlib.Path) -> Testbed | None:
        path = state_dir / "state.json"
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        return cls(
            state_dir=state_dir,
            kubeconfig=pathlib.Path(raw["kubeconfig"]),
            ca_cert=pathlib.Path(raw["ca_cert"]),
            ports=raw["ports"],
            nodes=raw["nodes"],
            nodes_per_clique=raw.get("nodes_per_clique", manifests.NODES_PER_CLIQUE),
            computedomain_crd=raw.get("computedomain_crd", versions.COMPUTE_DOMAIN_CRD),
            topology_crds=raw.get("topology_crds"),
            components=raw.get("components", {}),
            driver_values=tuple(raw.get("driver_values", ())),
        )

    def save(self) -> None:
        record = {
            "kubeconfig": str(self.kubeconfig),
            "ca_cert": str(self.ca_cert),
            "ports": self.ports,
            "nodes": self.nodes,
            "nodes_per_clique": self.nodes_per_clique,
            "computedomain_crd": self.computedomain_crd,
            "topology_crds": self.topology_crds,
            "components": self.components,
            "driver_values": list(self.driver_values),
        }
        (self.state_dir / "state.json").write_text(json.dumps(record, indent=2))

    @property
    def cliques(self) -> int:
        return -(-self.nodes // self.nodes_per_clique)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    def api(self) -> kube.Kube:
        """A client with cluster-admin rights, writing as the `mnnvl-testbed` field manager."""
        return kube.Kube(kube.load_api_client(self.kubeconfig), field_manager=FIELD_MANAGER)


def status(state_dir: pathlib.Path) -> dict[str, Any]:
    """Each component's state, and whether the API server answers."""
    supervisor = processes.Supervisor(state_dir)
    testbed = Testbed.load(state_dir)
    report: dict[str, Any] = {
        "state_dir": str(state_dir),
        "components": {name: "running" if supervisor.alive(name) else "stopped" for name in COMPONENTS},
        "controllers": {
            name: "running" if supervisor.alive(name) else "stopped"
            for name in supervisor.names()
            if name not in COMPONENTS
        },
    }
    if testbed is not None:
        report["kubeconfig"] = str(testbed.kubeconfig)
        report["apiserver_ready"] = _apiserver_ready(testbed)
        report["versions"] = testbed.components
        report["nodes"] = {"count": testbed.nodes, "per_clique": testbed.nodes_per_clique}
        report["crds"] = {"computedomain": testbed.computedomain_crd, "topology": testbed.topology_crds}
        report["driver_values"] = list(testbed.driver_values)
    return report


def is_running(state_dir: pathlib.Path) -> bool:
    report = status(state_dir)
    return bool(report.get("apiserver_ready")) and all(state == "running" for state in report["components"].values())


def down(state_dir: pathlib.Path) -> None:
    supervisor = processes.Supervisor(state_dir)
    # Controllers first (they are not in COMPONENTS), then the control plane in reverse start order.
    for name in [*(n for n in supervisor.names() if n not in COMPONENTS), *reversed(COMPONENTS)]:
        supervisor.stop(name)
    image.remove_testbed_containers(state_dir)
    (state_dir / "state.json").unlink(missing_ok=True)


def up(
    state_dir: pathlib.Path,
    *,
    nodes: int = DEFAULT_NODES,
    nodes_per_clique: int | None = None,
    computedomain_crd: str | None = None,
    topology_crds: str | None = None,
    echo: bool = True,
    api_server_only: bool = False,
    driver_values: Sequence[str] | None = None,
) -> Testbed:
    """Start everything, or reuse a testbed that is already running in `state_dir`.

    `nodes_per_clique` (default `manifests.NODES_PER_CLIQUE`) is fixed once nodes exist. `computedomain_crd`
    names a release of `versions.COMPUTE_DOMAIN_CRDS` (default `versions.COMPUTE_DOMAIN_CRD`), `topology_crds`
    one of `versions.TOPOLOGY_CRDS` (default: none installed). On a running testbed, a release asked for is
    installed in place, as a CRD upgrade would; None leaves what is installed. A running testbed only grows.
    `api_server_only` starts just etcd and kube-apiserver: a cluster without the NVIDIA driver, LWS or nodes.
    `driver_values` (`dra_driver.chart_values`; None: those of `dra_driver.VALUES_VARIABLE`) are set on the driver's
    chart; on a running testbed, other values than its driver runs with restart its controller with them.
    """
    started = time.monotonic()
    asked = dra_driver.values_from_environment() if driver_values is None else driver_values
    try:
        values = dra_driver.chart_values(asked)
    except ValueError as error:
        raise TestbedError(str(error)) from error
    existing = Testbed.load(state_dir)
    if existing is not None and is_running(state_dir):
        if existing.components == versions.component_versions():
            return _reuse(
                existing, nodes, nodes_per_clique, computedomain_crd, topology_crds, driver_values=values, echo=echo
            )
        _say(echo, f"the testbed in {state_dir} runs {existing.components or 'older versions'}; restarting it")
    if not api_server_only:
        _check_third_party(computedomain_crd, topology_crds)
    down(state_dir)
    tools = (versions.ETCD, versions.KUBE_APISERVER) if api_server_only else versions.ALL_TOOLS
    binaries = building.ensure_binaries(tools)
    built = time.monotonic()
    state_dir.mkdir(parents=True, exist_ok=True)
    supervisor = processes.Supervisor(state_dir)
    # A new cluster: nothing of the last one's data, logs or installed release (its controllers' blocks, written by
    # whatever version of the chart ran then, describe controllers that no longer run).
    for stale in ("etcd-data", "logs", "controllers"):
        shutil.rmtree(state_dir / stale, ignore_errors=True)
    pki_dir = state_dir / "pki"
    ca = certs.ensure_ca(pki_dir)
    testbed = Testbed(
        state_dir=state_dir,
        kubeconfig=state_dir / "admin.kubeconfig",
        ca_cert=ca.cert,
        ports={
            name: processes.free_port() for name in ("etcd", "etcd-peer", "kube-apiserver", "lws-webhook", "lws-health")
        },
        nodes=nodes,
        nodes_per_clique=nodes_per_clique or manifests.NODES_PER_CLIQUE,
        computedomain_crd=computedomain_crd or versions.COMPUTE_DOMAIN_CRD,
        topology_crds=topology_crds,
        components=versions.component_versions(),
        driver_values=values,
    )
    admin = certs.issue(
        ca,
        certs.KeyPair(pki_dir / "admin.crt", pki_dir / "admin.key"),
        common_name="admin",
        organizations=("system:masters",),
        client=True,
    )
    write_kubeconfig(testbed.kubeconfig, testbed, "admin", admin)

    _start_etcd(supervisor, binaries["etcd"], testbed)
    _start_apiserver(supervisor, binaries["kube-apiserver"], testbed, ca, pki_dir)
    if api_server_only:
        testbed.save()
        return testbed
    api = testbed.api()
    _install_apis(api, testbed)
    _start_control_loops(supervisor, binaries, testbed)
    create_nodes(api, nodes=testbed.nodes, nodes_per_clique=testbed.nodes_per_clique)
    _start_driver(supervisor, testbed)
    _start_lws(supervisor, binaries["lws-manager"], testbed, ca, pki_dir)
    _wait_nodes_ready(supervisor, api, nodes)
    testbed.save()
    took = f"{time.monotonic() - started:.0f}s (builds {built - started:.0f}s)"
    _say(echo, f"testbed up in {took}; {_shape(testbed)}; kubeconfig: {testbed.kubeconfig}")
    return testbed


def _reuse(
    existing: Testbed,
    nodes: int,
    nodes_per_clique: int | None,
    computedomain_crd: str | None,
    topology_crds: str | None,
    *,
    driver_values: tuple[str, ...],
    echo: bool,
) -> Testbed:
    if nodes_per_clique is not None and nodes_per_clique != existing.nodes_per_clique:
        raise TestbedError(
            f"the testbed in {existing.state_dir} runs {existing.nodes_per_clique} nodes per clique, not "
            f"{nodes_per_clique}: stop it first (mnnvl-testbed down), or use another --state-dir"
        )
    testbed = existing
    api = testbed.api()
    if nodes > testbed.nodes:
        testbed = dataclasses.replace(testbed, nodes=nodes)
        create_nodes(api, nodes=testbed.nodes, nodes_per_clique=testbed.nodes_per_clique)
        _wait_nodes_ready(processes.Supervisor(testbed.state_dir), api, nodes)
    if computedomain_crd is not None and computedomain_crd != testbed.computedomain_crd:
        crds.install_computedomain_crd(api, computedomain_crd)
        testbed = dataclasses.replace(testbed, computedomain_crd=computedomain_crd)
    if topology_crds is not None and topology_crds != testbed.topology_crds:
        crds.install_topology_crds(api, topology_crds)
        testbed = dataclasses.replace(testbed, topology_crds=topology_crds)
    if driver_values != testbed.driver_values:
        testbed = dataclasses.replace(testbed, driver_values=driver_values)
        restart_driver(testbed)
        _say(echo, "NVIDIA's ComputeDomain controller restarted with the driver chart values asked for")
    if testbed != existing:
        testbed.save()
    _say(echo, f"testbed already running; {_shape(testbed)}; kubeconfig: {testbed.kubeconfig}")
    return testbed


def _shape(testbed: Testbed) -> str:
    topology = f", Topology CRDs {testbed.topology_crds}" if testbed.topology_crds else ""
    driver = f", driver chart values {list(testbed.driver_values)}" if testbed.driver_values else ""
    return (
        f"{testbed.nodes} nodes in {testbed.cliques} cliques of {testbed.nodes_per_clique}, "
        f"ComputeDomain CRD {testbed.computedomain_crd}{topology}{driver}"
    )


def _check_third_party(computedomain_crd: str | None, topology_crds: str | None) -> None:
    """Fail before minutes of building when an upstream input (from its module or the third-party directory) is
    refused, missing or altered."""
    building.source_dir(versions.LWS_MANAGER)
    dra_driver.source()
    thirdparty.verified_path(versions.COMPUTE_DOMAIN_CRDS[computedomain_crd or versions.COMPUTE_DOMAIN_CRD].file)
    if topology_crds is not None:
        thirdparty.verified_path(versions.TOPOLOGY_CRDS[topology_crds].kai_topology)
        thirdparty.verified_path(versions.TOPOLOGY_CRDS[topology_crds].grove_binding)


def _say(echo: bool, message: str) -> None:
    if echo:
        print(message, flush=True)


def write_kubeconfig(path: pathlib.Path, testbed: Testbed, user: str, credentials: certs.KeyPair) -> None:
    """A kubeconfig for `user`, authenticated by a client certificate."""
    write_kubeconfig_for(
        path,
        testbed,
        user,
        {"client-certificate-data": _encoded(credentials.cert), "client-key-data": _encoded(credentials.key)},
    )


def write_token_kubeconfig(path: pathlib.Path, testbed: Testbed, user: str, token: str) -> None:
    """A kubeconfig for `user`, authenticated by a bearer token (a ServiceAccount's)."""
    write_kubeconfig_for(path, testbed, user, {"token": token})


#: How long the ServiceAccount tokens the testbed's processes use stay valid (a testbed runs for hours at most).
TOKEN_SECONDS = 24 * 3600


def service_account_token(testbed: Testbed, namespace: str, account: str) -> str:
    """A token the API server issues (TokenRequest) for ServiceAccount `namespace/account`."""
    answer = testbed.api().request(
        "POST",
        kube.path_of("v1", "serviceaccounts", namespace=namespace, name=account) + "/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )
    return str(answer["status"]["token"])


def service_account_kubeconfig(testbed: Testbed, namespace: str, account: str, path: pathlib.Path) -> pathlib.Path:
    """Write to `path` a kubeconfig for ServiceAccount `namespace/account`, with a token the API server issues for
    it; return `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_token_kubeconfig(
        path,
        testbed,
        f"system:serviceaccount:{namespace}:{account}",
        service_account_token(testbed, namespace, account),
    )
    return path


def _encoded(file: pathlib.Path) -> str:
    return base64.b64encode(file.read_bytes()).decode()


def write_kubeconfig_for(path: pathlib.Path, testbed: Testbed, user: str, authentication: dict[str, str]) -> None:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testbed",
                "cluster": {"server": testbed.server, "certificate-authority-data": _encoded(testbed.ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": authentication,
            }
        ],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
        "current-context": "testbed",
    }
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)


def _start_etcd(supervisor: processes.Supervisor, binary: pathlib.Path, testbed: Testbed) -> None:
    client_url = f"http://127.0.0.1:{testbed.ports['etcd']}"
    peer_url = f"http://127.0.0.1:{testbed.ports['etcd-peer']}"
    supervisor.start(
        "etcd",
        [
            str(binary),
            f"--data-dir={testbed.state_dir / 'etcd-data'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ],
    )
    wait_http(supervisor, "etcd", f"{client_url}/health", context=None)


def _start_apiserver(
    supervisor: processes.Supervisor, binary: pathlib.Path, testbed: Testbed, ca: certs.KeyPair, pki_dir: pathlib.Path
) -> None:
    certs.issue(
        ca,
        certs.KeyPair(pki_dir / "apiserver.crt", pki_dir / "apiserver.key"),
        common_name="kube-apiserver",
        hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "10.96.0.1"),
    )
    certs.ensure_service_account_keys(pki_dir)
    (testbed.state_dir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    _launch_apiserver(supervisor, binary, testbed)


def _launch_apiserver(supervisor: processes.Supervisor, binary: pathlib.Path, testbed: Testbed) -> None:
    """Start kube-apiserver from the certificates and audit policy in the state dir, and wait until it is ready."""
    pki_dir = testbed.state_dir / "pki"
    supervisor.start(
        "kube-apiserver",
        [
            str(binary),
            f"--etcd-servers=http://127.0.0.1:{testbed.ports['etcd']}",
            f"--secure-port={testbed.ports['kube-apiserver']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
            f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--client-ca-file={testbed.ca_cert}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={pki_dir / 'sa.pub'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            # Fake nodes run no kubelet and mount no tokens; without this, pods would race service-account creation.
            "--disable-admission-plugins=ServiceAccount",
            "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            f"--audit-policy-file={testbed.state_dir / 'audit-policy.yaml'}",
            f"--audit-log-path={audit_log(testbed.state_dir)}",
            "--audit-log-maxsize=200",
            "--audit-log-maxbackup=1",
            "--v=1",
        ],
    )
    context = ssl.create_default_context(cafile=str(testbed.ca_cert))
    context.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
    wait_http(supervisor, "kube-apiserver", f"{testbed.server}/readyz", context=context, timeout=120)


@contextlib.contextmanager
def apiserver_stopped(testbed: Testbed) -> Iterator[None]:
    """kube-apiserver stopped for the body, as in an API-server restart or an outage: its port refuses every
    connection while etcd and everything else keep running. Started again afterwards, on the same port with the
    same flags and data, and ready, however the body ended."""
    supervisor = processes.Supervisor(testbed.state_dir)
    binary = building.ensure_binaries((versions.KUBE_APISERVER,))["kube-apiserver"]
    supervisor.stop("kube-apiserver")
    try:
        yield
    finally:
        _launch_apiserver(supervisor, binary, testbed)


def _install_apis(api: kube.Kube, testbed: Testbed) -> None:
    lws_crds = building.source_dir(versions.LWS_MANAGER) / "config" / "crd" / "bases"
    crds.install(api, [yaml.safe_load(path.read_text()) for path in sorted(lws_crds.glob("*.yaml"))])
    dra_driver.install(api, testbed.computedomain_crd, testbed.driver_values)
    if testbed.topology_crds is not None:
        crds.install_topology_crds(api, testbed.topology_crds)
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lws-system"}}, "namespaces")


def _start_control_loops(supervisor: processes.Supervisor, binaries: dict[str, pathlib.Path], testbed: Testbed) -> None:
    for name, command in _control_loop_commands(binaries, testbed).items():
        supervisor.start(name, command)
    for name in CONTROL_LOOPS:
        supervisor.ensure_alive(name)


#: The components a kubelet would restart when they exit (kube-scheduler exits on purpose when it finds its cache
#: corrupted, e.g. after an API server restart), besides etcd and kube-apiserver.
CONTROL_LOOPS = ("kube-controller-manager", "kube-scheduler", "kwok")


def _control_loop_commands(binaries: dict[str, pathlib.Path], testbed: Testbed) -> dict[str, list[str]]:
    kubeconfig = str(testbed.kubeconfig)
    pki_dir = testbed.state_dir / "pki"
    return {
        "kube-controller-manager": [
            str(binaries["kube-controller-manager"]),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            "--controllers=*,resourceclaim-controller",
            f"--service-account-private-key-file={pki_dir / 'sa.key'}",
            f"--root-ca-file={testbed.ca_cert}",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--concurrent-statefulset-syncs=10",
            "--concurrent-gc-syncs=20",
            "--v=1",
        ],
        "kube-scheduler": [
            str(binaries["kube-scheduler"]),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            "--v=1",
        ],
        "kwok": [
            str(binaries["kwok"]),
            f"--kubeconfig={kubeconfig}",
            f"--config={_kwok_stages(testbed)}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={manifests.KWOK_NODE_ANNOTATION}=fake",
            "--cidr=10.244.0.0/16",
            "--node-ip=10.0.0.1",
            "--node-lease-duration-seconds=40",
        ],
    }


def restart_exited(testbed: Testbed) -> list[str]:
    """Start again, as they were started, the components that exited (all but etcd and kube-apiserver, which
    faults stop and start themselves): what a kubelet does for a crashed static pod or container. Returns their
    names."""
    supervisor = processes.Supervisor(testbed.state_dir)
    exited = [name for name in COMPONENTS[2:] if not supervisor.alive(name)]
    if not exited:
        return []
    binaries = building.ensure_binaries()
    loops = _control_loop_commands(binaries, testbed)
    for name in exited:
        if name in loops:
            supervisor.start(name, loops[name])
        elif name == "lws-manager":
            command, env = _lws_command(binaries["lws-manager"], testbed)
            supervisor.start(name, command, env=env)
        else:
            start_driver_part(supervisor, testbed, name)
    return exited


def _kwok_stages(testbed: Testbed) -> pathlib.Path:
    """kwok's "fast" stages from its module: nodes become Ready, bound pods run, deleted pods go."""
    stages = building.module_dir("sigs.k8s.io/kwok", versions.KWOK_VERSION) / "kustomize" / "stage"
    files = [
        stages / "node" / "fast" / "node-initialize.yaml",
        stages / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml",
        *(stages / "pod" / "fast" / f"pod-{stage}.yaml" for stage in ("ready", "complete", "delete")),
    ]
    config = testbed.state_dir / "kwok-stages.yaml"
    config.write_text("\n---\n".join(path.read_text() for path in files))
    return config


def create_nodes(api: kube.Kube, *, nodes: int, nodes_per_clique: int) -> None:
    """Make sure fake nodes 0 … nodes-1 exist (more are left alone: a reused cluster only ever grows)."""
    for index in range(nodes):
        node = manifests.fake_node(index, nodes_per_clique=nodes_per_clique)
        if api.get("v1", "nodes", node["metadata"]["name"]) is not None:
            continue
        api.apply({key: value for key, value in node.items() if key != "status"}, "nodes")
        # Capacity lives in status, which only the status subresource accepts.
        status_path = kube.path_of("v1", "nodes", name=node["metadata"]["name"]) + "/status"
        api.request("PATCH", status_path, body={"status": node["status"]}, content_type=kube.MERGE_PATCH)


def driver_commands(testbed: Testbed) -> dra_driver.Commands:
    """How the NVIDIA driver's parts run, by component name: (command, environment). The controller authenticates as
    its chart's ServiceAccount, with a token issued for this start."""
    controller_kubeconfig = service_account_kubeconfig(
        testbed,
        dra_driver.NAMESPACE,
        dra_driver.service_account(testbed.driver_values),
        testbed.state_dir / dra_driver.COMPONENT / "serviceaccount.kubeconfig",
    )
    return dra_driver.commands(
        kubeconfig=testbed.kubeconfig,
        controller_kubeconfig=controller_kubeconfig,
        state_dir=testbed.state_dir,
        values=testbed.driver_values,
    )


def start_driver_part(supervisor: processes.Supervisor, testbed: Testbed, name: str) -> None:
    """Start one of the driver's parts (`dra_driver.PARTS`), as `up` starts it."""
    dra_driver.start(supervisor, driver_commands(testbed), name)


def restart_driver(testbed: Testbed) -> None:
    """NVIDIA's ComputeDomain controller restarted with `testbed.driver_values`, its chart's other objects applied
    with them first, as a `helm upgrade` rolls its Deployment. The stand-ins read no chart value and keep running."""
    dra_driver.apply_chart(testbed.api(), testbed.driver_values)
    supervisor = processes.Supervisor(testbed.state_dir)
    supervisor.stop(dra_driver.COMPONENT)
    start_driver_part(supervisor, testbed, dra_driver.COMPONENT)


def _start_driver(supervisor: processes.Supervisor, testbed: Testbed) -> None:
    commands = driver_commands(testbed)
    for name in dra_driver.PARTS:
        dra_driver.start(supervisor, commands, name)


def _start_lws(
    supervisor: processes.Supervisor, binary: pathlib.Path, testbed: Testbed, ca: certs.KeyPair, pki_dir: pathlib.Path
) -> None:
    lws_dir = testbed.state_dir / "lws"
    cert_dir = lws_dir / "certs"
    certs.issue(
        ca,
        certs.KeyPair(cert_dir / "tls.crt", cert_dir / "tls.key"),
        common_name="lws-webhook",
        hosts=("127.0.0.1", "localhost"),
    )
    config_file = lws_dir / "config.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.lws.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "webhook": {"host": "127.0.0.1", "port": testbed.ports["lws-webhook"], "certDir": str(cert_dir)},
                "metrics": {"bindAddress": "0"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{testbed.ports['lws-health']}"},
            }
        )
    )
    _run_lws(supervisor, binary, testbed)
    source = building.source_dir(versions.LWS_MANAGER) / "config" / "webhook" / "manifests.yaml"
    upstream = [document for document in yaml.safe_load_all(source.read_text()) if document]
    api = testbed.api()
    for configuration in manifests.local_lws_webhooks(
        upstream, base_url=f"https://127.0.0.1:{testbed.ports['lws-webhook']}", ca_bundle=ca.cert.read_bytes()
    ):
        api.apply(configuration, configuration["kind"].lower() + "s")


def _run_lws(supervisor: processes.Supervisor, binary: pathlib.Path, testbed: Testbed) -> None:
    command, env = _lws_command(binary, testbed)
    supervisor.start("lws-manager", command, env=env)
    wait_http(supervisor, "lws-manager", f"http://127.0.0.1:{testbed.ports['lws-health']}/readyz", context=None)
    # Its readiness check does not wait for the webhook server, which every LWS write goes through.
    port = testbed.ports["lws-webhook"]
    try:
        waiting.wait_for(lambda: _listening(port), what=f"LWS's webhook server on port {port}", timeout=30)
    except waiting.WaitTimeoutError as timeout:
        raise supervisor.fail("lws-manager", str(timeout)) from timeout


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def configure_lws_gang_scheduling(testbed: Testbed, settings: dict[str, str] | None) -> None:
    """Upstream LWS's `gangSchedulingManagement` set to `settings` (None: none), restarted if that changes it, as a
    `helm upgrade` of its chart would."""
    config_file = testbed.state_dir / "lws" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    if config.get("gangSchedulingManagement") == settings:
        return
    if settings is None:
        del config["gangSchedulingManagement"]
    else:
        config["gangSchedulingManagement"] = settings
    config_file.write_text(yaml.safe_dump(config))
    supervisor = processes.Supervisor(testbed.state_dir)
    supervisor.stop("lws-manager")
    _run_lws(supervisor, building.ensure_binaries((versions.LWS_MANAGER,))["lws-manager"], testbed)


def _lws_command(binary: pathlib.Path, testbed: Testbed) -> tuple[list[str], dict[str, str]]:
    config_file = testbed.state_dir / "lws" / "config.yaml"
    return [str(binary), f"--config={config_file}", "--zap-log-level=2"], {"KUBECONFIG": str(testbed.kubeconfig)}


def _wait_nodes_ready(supervisor: processes.Supervisor, api: kube.Kube, count: int) -> None:
    def ready_nodes() -> bool:
        nodes = api.list_objects("v1", "nodes", labelSelector=f"{manifests.TESTBED_NODE_LABEL}=true")
        # Ready, and the node lifecycle controller has lifted its not-ready taint: pods can be scheduled there.
        return (
            sum(1 for node in nodes if kube.is_condition_true(node, "Ready") and not node["spec"].get("taints"))
            >= count
        )

    def published_slices() -> bool:
        slices = api.list_objects("resource.k8s.io/v1", "resourceslices")
        return sum(1 for item in slices if item["spec"]["driver"] == keys.COMPUTE_DOMAIN_DRIVER) >= count

    for name, what, condition in (
        ("kwok", f"{count} fake nodes to be Ready", ready_nodes),
        (kubelet_plugin.COMPONENT, f"{count} channel ResourceSlices", published_slices),
    ):
        try:
            waiting.wait_for(condition, what=what, timeout=90)
        except waiting.WaitTimeoutError as timeout:
            raise supervisor.fail(name, str(timeout)) from timeout


def wait_http(
    supervisor: processes.Supervisor, name: str, url: str, *, context: ssl.SSLContext | None, timeout: float = 60
) -> None:
    """Until component `name` answers 200 at `url`; fails with its log's tail if it exits or the time runs out."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        supervisor.ensure_alive(name)
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as error:
            last = str(error)
        time.sleep(0.2)
    raise supervisor.fail(name, f"not ready at {url} after {timeout:.0f}s ({last})")


def _apiserver_ready(testbed: Testbed) -> bool:
    context = ssl.create_default_context(cafile=str(testbed.ca_cert))
    pki_dir = testbed.state_dir / "pki"
    context.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
    try:
        with urllib.request.urlopen(f"{testbed.server}/readyz", timeout=2, context=context) as response:
            ready: bool = response.status == 200
            return ready
    except (urllib.error.URLError, OSError):
        return False
