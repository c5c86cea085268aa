"""What the testbed scenarios share: the testbed itself, raw watches with arrival times, workloads, tables, plots.

Every scenario measures mnnvl against upstream LWS in the same run on the same machine and reports ratios, so
a slower or busier machine moves both sides alike. Nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pathlib
import shlex
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: PNG files only
import matplotlib.figure

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import building, cluster, controllers, dra_driver, processes, testing

LWS_API = "leaderworkerset.x-k8s.io/v1"
CD_API = f"{keys.COMPUTE_DOMAIN_GROUP}/{keys.COMPUTE_DOMAIN_VERSION}"
OUT = pathlib.Path(__file__).parent / "out"
#: Pods of the benchmarks ask for a node no testbed has: they are created, admitted, gated and ungated like any
#: other pod, then stay Pending, so the scheduler parks them instead of retrying them against full nodes.
UNSCHEDULABLE = {"mnnvl-bench/no-such-node": "true"}
CONTROLLERS = (keys.LWS_CONTROLLER, keys.GUARDIAN_CONTROLLER)


def default_state_dir() -> pathlib.Path:
    """A testbed of the benchmarks' own (unless MNNVL_TESTBED_STATE names one), so measuring never restarts the
    controllers under a test session that shares the default testbed."""
    return pathlib.Path(os.environ.get("MNNVL_TESTBED_STATE", building.cache_root() / "bench"))


class _DriverQps(argparse.Action):
    """Sets the driver's chart values for `--driver-qps` where `cluster.up` reads them, the testbed's variable:
    every scenario brings its testbed up with `running_testbed` after parsing, which then (re)starts the driver."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, values)
        os.environ[dra_driver.VALUES_VARIABLE] = shlex.join(dra_driver.client_rate_values(values))


def add_common_arguments(parser: argparse.ArgumentParser, scenario: str) -> None:
    parser.add_argument("--plot", type=pathlib.Path, default=OUT / f"{scenario}.png", help="where the PNG goes")
    parser.add_argument("--state-dir", type=pathlib.Path, default=default_state_dir(), help="the testbed to use")
    parser.add_argument(
        "--driver-qps",
        type=int,
        action=_DriverQps,
        metavar="N",
        help="run the NVIDIA driver's controller with client limits N QPS, burst 2N, set through its chart's "
        f"controller env (default: the driver's own, {dra_driver.DEFAULT_CLIENT_LIMITS['KUBE_API_QPS']} QPS, "
        f"or what {dra_driver.VALUES_VARIABLE} sets)",
    )


def running_testbed(
    state_dir: pathlib.Path,
    *,
    started: Sequence[str] = CONTROLLERS,
    topology_crds: str | None = None,
    nodes: int = cluster.DEFAULT_NODES,
) -> cluster.Testbed:
    """The testbed (reused, or started) with the `started` controllers (default mnnvl-lws and mnnvl-guardian)
    freshly (re)started from this source tree, gate enabled, so a run measures the code checked out now;
    `topology_crds` (a key of `versions.TOPOLOGY_CRDS`) installs KAI's and Grove's CRDs first, which
    mnnvl-topology needs; a testbed of fewer than `nodes` fake nodes grows to that many (none is ever removed)."""
    bed = cluster.up(state_dir, nodes=nodes, topology_crds=topology_crds, echo=True)
    for controller in started:
        controllers.start(bed, controller, gate=True)
    return bed


def pid_of(bed: cluster.Testbed, component: str) -> int:
    pid = processes.Supervisor(bed.state_dir).pid(component)
    if pid is None:
        raise RuntimeError(f"{component} is not running in {bed.state_dir}")
    return pid


@contextlib.contextmanager
def namespace(api: kube.Kube, prefix: str) -> Iterator[str]:
    with testing.namespace(api, prefix) as name:
        yield name


def lws_manifest(name: str, *, replicas: int, size: int = 2, opt_in: bool = True) -> dict[str, Any]:
    """An LWS whose pods each ask for 4 GPUs (so mnnvl injects the channel claim) and for no existing node."""
    container = {"name": "vllm", "image": "registry.example/vllm:1", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
    annotations = {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: keys.OPT_IN_ENABLED} if opt_in else {}
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "workerTemplate": {"spec": {"containers": [container], "nodeSelector": dict(UNSCHEDULABLE)}},
            },
        },
    }


def create_lws(api: kube.Kube, ns: str, manifest: dict[str, Any]) -> None:
    api.request("POST", kube.path_of(LWS_API, "leaderworkersets", namespace=ns), body=manifest)


def ds_manifest(name: str, *, slices: int, roles: int, replicas: int = 1, size: int = 2) -> dict[str, Any]:
    """An opted-in DisaggregatedSet of `slices` slices of `roles` roles, each role `replicas` groups of `size` pods
    shaped like `lws_manifest`'s (4 GPUs, no existing node), so every role is enrolled in its slice's domain."""
    spec = lws_manifest(name, replicas=replicas, size=size, opt_in=False)["spec"]
    return {
        "apiVersion": keys.DS_API_VERSION,
        "kind": keys.DS_KIND,
        "metadata": {"name": name, "annotations": {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: keys.OPT_IN_ENABLED}},
        "spec": {"slices": slices, "roles": [{"name": f"role{index}", "spec": spec} for index in range(roles)]},
    }


def create_ds(api: kube.Kube, ns: str, manifest: dict[str, Any]) -> None:
    api.request("POST", kube.path_of(keys.DS_API_VERSION, keys.DS_PLURAL, namespace=ns), body=manifest)


def delete_ds(api: kube.Kube, ns: str, name: str) -> None:
    api.delete(kube.path_of(keys.DS_API_VERSION, keys.DS_PLURAL, namespace=ns, name=name))


def count(api: kube.Kube, api_version: str, plural: str, ns: str) -> int:
    """How many objects of a kind the namespace holds, from a page of one object: the API server says how many
    remain (read from etcd, so exact), where listing tens of thousands of pods to count them would load the
    machine the benchmark measures. No selector: with one, the API server does not count."""
    listed = api.request("GET", kube.path_of(api_version, plural, namespace=ns), query={"limit": "1"})
    remaining = int(listed["metadata"].get("remainingItemCount") or 0)
    return len(listed["items"]) + remaining


def load(api: kube.Kube, ns: str, workloads: int, groups: int, *, ungated: bool = True) -> None:
    """`workloads` opted-in LeaderWorkerSets of `groups` groups of 2 pods each; until every pod exists (and, with
    `ungated`, has had its gate removed)."""
    for index in range(workloads):
        create_lws(api, ns, lws_manifest(f"model-{index}", replicas=groups))
    expected = workloads * groups * 2

    def settled() -> bool:
        try:
            pods = api.list_objects("v1", "pods", namespace=ns, labelSelector=keys.LWS_NAME_LABEL)
        except kube.ApiError as error:
            if error.status != 504:  # the watch cache lags behind a burst of 5,000 pods: look again later
                raise
            return False
        mine = [p for p in pods if p["metadata"]["namespace"] == ns]
        gated = [p for p in mine if keys.SCHEDULING_GATE in {g["name"] for g in p["spec"].get("schedulingGates") or []}]
        return len(mine) == expected and not (ungated and gated)

    what = f"{expected} pods" + (", none gated" if ungated else "")
    testing.wait_for(settled, what=what, timeout=300 + expected * 0.2, interval=5)


def delete_lws(api: kube.Kube, ns: str, name: str) -> None:
    api.delete(kube.path_of(LWS_API, "leaderworkersets", namespace=ns, name=name))


def wait_drained(api: kube.Kube, ns: str, *, timeout: float = 300) -> None:
    """Until the namespace holds no pods, StatefulSets or ComputeDomains any more."""

    def left() -> dict[str, int]:
        # Counted, not listed: after a burst of 1,000 groups, listing thousands of objects four times a second
        # would load the API server that is draining them.
        return {
            "pods": count(api, "v1", "pods", ns),
            "statefulsets": count(api, "apps/v1", "statefulsets", ns),
            "computedomains": count(api, CD_API, keys.COMPUTE_DOMAIN_PLURAL, ns),
        }

    testing.wait_for(
        lambda: not any(left().values()), what=f"{ns} to drain", state=lambda: str(left()), timeout=timeout
    )


def wait_released(api: kube.Kube, ns: str, *, timeout: float = 300) -> None:
    """Until mnnvl is done with the namespace's workloads: no pods or StatefulSets left, and every ComputeDomain
    being deleted without mnnvl's protection finalizer (what is left is the driver's own clean-up)."""

    def held() -> dict[str, int]:
        domains = api.list_objects(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns)
        return {
            "pods": count(api, "v1", "pods", ns),
            "statefulsets": count(api, "apps/v1", "statefulsets", ns),
            "computedomains held by mnnvl": sum(
                1
                for domain in domains
                if not domain["metadata"].get("deletionTimestamp")
                or keys.PROTECTION_FINALIZER in (domain["metadata"].get("finalizers") or [])
            ),
        }

    testing.wait_for(
        lambda: not any(held().values()),
        what=f"mnnvl to let {ns} go",
        state=lambda: str(held()),
        timeout=timeout,
        interval=5,
    )


class Watch:
    """One raw watch of a collection, in a thread: each event's type and object, stamped on arrival
    (time.monotonic) before it is decoded, and handed to `on_event` in order."""

    def __init__(
        self,
        api: kube.Kube,
        path: str,
        on_event: Callable[[float, str, dict[str, Any]], None],
        *,
        query: dict[str, str] | None = None,
    ) -> None:
        self.api, self.path, self.on_event = api, path, on_event
        self.query = dict(query or {})
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch {path}", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"watch of {self.path} did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        # Closing the socket is what unblocks the thread's read; releasing the connection would wait for it.
        with contextlib.suppress(Exception):
            self._response.connection.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)

    def _open(self, resource_version: str) -> Any:
        query = {**self.query, "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "false"}
        _, url, headers, _, _ = self.api.api.param_serialize(
            method="GET",
            resource_path=f"{self.path}?{urllib.parse.urlencode(query)}",
            header_params={"Accept": kube.JSON},
            auth_settings=["BearerToken"],
        )
        return self.api.api.call_api("GET", url, header_params=headers, _request_timeout=(10, 3600)).response

    def _run(self) -> None:
        listed = self.api.request("GET", self.path, query={**self.query, "limit": "1"})
        resource_version = str(listed["metadata"]["resourceVersion"])
        while not self._stop.is_set():
            try:
                self._response = self._open(resource_version)
                self._ready.set()
                buffer = b""
                for chunk in self._response.stream(65536, decode_content=False):
                    arrived = time.monotonic()
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            self.errors.append(str(event["object"].get("message")))
                            continue
                        resource_version = event["object"]["metadata"]["resourceVersion"]
                        self.on_event(arrived, event["type"], event["object"])
            except Exception as error:  # a dropped connection is resumed from the last resourceVersion
                if self._stop.is_set():
                    return
                self.errors.append(f"{type(error).__name__}: {error}")
                time.sleep(0.2)


# --- resident memory ---------------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def rss(bed: cluster.Testbed, components: Sequence[str]) -> dict[str, float]:
    """VmRSS in MiB of each testbed component (a supervisor name: `mnnvl-lws-0`, `lws-manager`)."""
    return {component: rss_mib(pid_of(bed, component)) for component in components}


class PeakSampler:
    """Samples RSS every `every` seconds on a thread of its own while a phase runs; keeps the highest value."""

    def __init__(self, bed: cluster.Testbed, components: Sequence[str], every: float = 2.0) -> None:
        self.bed = bed
        self.components = tuple(components)
        self.every = every
        self.peak = dict.fromkeys(self.components, 0.0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            for component, value in rss(self.bed, self.components).items():
                self.peak[component] = max(self.peak[component], value)
            self._done.wait(self.every)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


def rss_plot(
    components: Sequence[str], phases: Sequence[tuple[str, dict[str, float]]], path: pathlib.Path, title: str
) -> None:
    """Bars of each component's RSS, one per phase (label, RSS by component)."""
    figure_ = figure(width=7)
    axes = figure_.axes[0]
    width = 0.8 / len(phases)
    for index, (label, values) in enumerate(phases):
        offset = (index - (len(phases) - 1) / 2) * width
        axes.bar(
            [p + offset for p in range(len(components))], [values[c] for c in components], width=width, label=label
        )
    axes.set_xticks(list(range(len(components))), list(components))
    axes.set_ylabel("RSS, MiB")
    axes.grid(axis="y", alpha=0.3)
    axes.legend()
    save(figure_, path, title)


# --- statistics, tables and plots -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(math.ceil(q / 100 * len(ordered)), 1)
    return ordered[rank - 1]


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan


def cell(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (pasted as is into docs/performance.md); the first column left-aligned."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---", *("---:" for _ in headers[1:])]) + "|",
    ]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def figure(columns: int = 1, *, width: float = 5.0, height: float = 4.0) -> matplotlib.figure.Figure:
    figure = matplotlib.figure.Figure(figsize=(width * columns, height), layout="constrained")
    figure.subplots(1, columns, squeeze=False)
    return figure


def cumulative(axes: Any, seconds: Sequence[float], label: str, **style: Any) -> None:
    """A step plot of the fraction of samples at or below each value, in milliseconds."""
    ordered = sorted(v * 1e3 for v in seconds)
    fractions = [0.0, *((i + 1) / len(ordered) for i in range(len(ordered)))]
    axes.step([0.0, *ordered], fractions, where="post", label=label, **style)


def save(figure: matplotlib.figure.Figure, path: pathlib.Path, title: str) -> None:
    figure.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    print(f"plot: {path}", flush=True)


def machine() -> str:
    cores = os.cpu_count()
    memory_kib = next(
        int(line.split()[1]) for line in pathlib.Path("/proc/meminfo").read_text().splitlines() if "MemTotal" in line
    )
    return f"{cores} cores, {memory_kib / 2**20:.0f} GiB, {time.strftime('%Y-%m-%d')}"


def commit() -> str:
    """The commit measured (`git log -1 --oneline`), with a mark when the working tree differs from it."""
    root = pathlib.Path(__file__).parent.parent
    try:
        head = subprocess.run(
            ["git", "log", "-1", "--oneline"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "packages", ":(exclude)packages/mnnvl-testbed"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "(no git)"
    return head + (" (+ uncommitted product changes)" if dirty else "")


def log_errors(bed: cluster.Testbed, logged_by: Sequence[str] = CONTROLLERS) -> int:
    """Error lines the `logged_by` controllers have logged so far (their logs are JSON lines)."""
    supervisor = processes.Supervisor(bed.state_dir)
    total = 0
    for controller in logged_by:
        for name in controllers.replica_names(bed, controller):
            log = supervisor.log(name)
            if log.exists():
                total += sum(1 for line in log.read_text(errors="replace").splitlines() if '"level": "error"' in line)
    return total


def header(scenario: str, bed: cluster.Testbed) -> None:
    # The driver's client limits bound how fast domains get their claim templates: every table says which it ran with.
    limits = dra_driver.client_limits(processes.Supervisor(bed.state_dir).environment(dra_driver.COMPONENT))
    driver = f"driver client limits: {limits['KUBE_API_QPS']} QPS, burst {limits['KUBE_API_BURST']}"
    print(
        f"scenario {scenario}; machine: {machine()}; commit: {commit()}; testbed: {bed.state_dir}; {driver}",
        flush=True,
    )
