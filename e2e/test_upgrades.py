"""Upgrading mnnvl, and rolling it back, restarts nothing (docs/upgrades.md).

The release is first installed from the chart and code of the baseline commit (`baseline.UPGRADE_BASELINE`), two
replicas per controller, and runs the seeds' two workloads. Then `helm upgrade` to this tree, controller by
controller; `helm rollback` to the baseline, all at once; and `helm upgrade` again, all at once. Each controller's
Deployment rolls as with two replicas (one new replica up, then one old one down), so an old and a new replica run
side by side: during each overlap the webhooks are served first by the old replica, then by the new one, while
the workloads are edited as users do (scaled, annotated with keys that are not mnnvl's).

After each step nothing restarted: no pod recreated, no domain deleted or recreated, no new revision of any
workload, no call to mnnvl's webhooks failed or was refused; and the pods created meanwhile have their claims.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import pathlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import baseline, chart, cluster, controllers, release, testing

from . import workloads

LWS = "deepseek-r1"
DS = "llm-serving"
#: Rolled in this order controller by controller; the order a platform team would pick is not prescribed.
CONTROLLERS = (keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER)
#: The annotation a user adds to the workloads meanwhile: not mnnvl's, so it must change no revision.
USER_ANNOTATION = "example.com/on-call"
REJECTION_METRICS = ("apiserver_admission_webhook_rejection_count", "apiserver_admission_webhook_fail_open_count")


Edit = Callable[[], None]


@dataclasses.dataclass(frozen=True)
class Version:
    """One version of mnnvl: the chart a release is installed from and the code its controllers run."""

    name: str
    chart_dir: pathlib.Path
    #: `controllers.Replica.sources`: empty for this tree.
    sources: str


CURRENT = Version("this tree", chart.CHART_DIR, "")


def baseline_version() -> Version:
    tree = baseline.tree()
    return Version(f"baseline {baseline.UPGRADE_BASELINE[:12]}", tree / "charts" / "mnnvl", baseline.python_path(tree))


@dataclasses.dataclass(frozen=True)
class Running:
    """What must survive every step: the workloads' pods, domains and revisions as first settled."""

    pods: dict[str, str]
    domains: dict[str, str]
    revisions: dict[str, str]


def observe(api: kube.Kube, ns: str) -> Running:
    # The workloads' revisions (owned by an LWS or a DisaggregatedSet: a StatefulSet's own come with each new group)
    # and the revision each StatefulSet runs.
    revisions = {
        f"ControllerRevision/{item['metadata']['name']}": item["metadata"]["uid"]
        for item in api.list_objects("apps/v1", "controllerrevisions", namespace=ns)
        if {owner["kind"] for owner in item["metadata"].get("ownerReferences", [])} != {"StatefulSet"}
    }
    for sts in api.list_objects("apps/v1", "statefulsets", namespace=ns):
        labels = sts["metadata"].get("labels") or {}
        status = sts.get("status", {})
        revisions[f"StatefulSet/{sts['metadata']['name']}"] = " ".join(
            (labels.get(keys.LWS_TEMPLATE_REVISION_HASH_LABEL, ""), status.get("updateRevision", ""))
        )
    return Running(
        pods={p["metadata"]["name"]: p["metadata"]["uid"] for p in testing.pods(api, ns)},
        domains={name: d["metadata"]["uid"] for name, d in workloads.domains(api, ns).items()},
        revisions=revisions,
    )


def webhook_rejections(api: kube.Kube) -> dict[str, float]:
    """kube-apiserver's counts of refused and failed-open calls to mnnvl's webhooks, by series."""
    names = {
        hook["name"]
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        for configuration in api.list_objects(
            "admissionregistration.k8s.io/v1", plural, labelSelector=release.RELEASE_SELECTOR
        )
        for hook in configuration.get("webhooks", [])
    }
    _, url, headers, _, _ = api.api.param_serialize(
        method="GET", resource_path="/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    text = api.api.call_api("GET", url, header_params=headers).read().decode()  # type: ignore[no-untyped-call]
    found = {}
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        match = re.match(r'(\w+)\{.*name="([^"]+)"', series)
        if match and match.group(1) in REJECTION_METRICS and match.group(2) in names:
            found[series] = float(value)
    return found


class Upgrade:
    """The testbed's mnnvl release being moved between versions. Each controller's webhooks point at one replica at
    a time, moved to a new replica before an old one stops, as a Service's endpoints follow a rolling update."""

    def __init__(self, testbed: cluster.Testbed) -> None:
        self.testbed = testbed
        self.steps: list[str] = []

    def install(self, version: Version) -> None:
        release.upgrade(self.testbed, version.chart_dir)
        for controller in reversed(CONTROLLERS):
            controllers.start(self.testbed, controller, replicas=2, sources=version.sources)

    def roll(self, version: Version, *, one_by_one: bool, edits: dict[str, tuple[Edit, Edit]]) -> None:
        """`helm upgrade` (or rollback) to `version`: the chart first, then the Deployments, controller by controller
        or all at once; `edits[controller]`: one made while the old replica serves the webhooks, one while the new
        one does, during that controller's first overlap of old and new."""
        release.upgrade(self.testbed, version.chart_dir)

        def roll_one(controller: str) -> None:
            pending = list(edits.get(controller, ()))

            def overlap(old: controllers.Replica, new: controllers.Replica) -> None:
                for replica, edit in zip((old, new), pending, strict=False):
                    controllers.point_webhooks_at(self.testbed, replica, controller)
                    edit()
                pending.clear()

            controllers.roll(self.testbed, controller, sources=version.sources, overlap=overlap)

        if one_by_one:
            for controller in CONTROLLERS:
                roll_one(controller)
        else:
            with concurrent.futures.ThreadPoolExecutor(len(CONTROLLERS)) as pool:
                for done in [pool.submit(roll_one, controller) for controller in CONTROLLERS]:
                    done.result()
        self.steps.append(f"{'controller by controller' if one_by_one else 'all at once'} to {version.name}")


@pytest.fixture
def upgrade(
    testbed: cluster.Testbed, api: kube.Kube, ns: str, lws_controller: list[controllers.Replica]
) -> Iterator[Upgrade]:
    """The release at the baseline version, two replicas per controller behind Service stand-ins; afterwards back to
    this tree with one replica each, as the session's controllers run."""
    moving = Upgrade(testbed)
    try:
        moving.install(baseline_version())
        yield moving
    finally:
        release.upgrade(testbed, chart.CHART_DIR)
        for controller in reversed(CONTROLLERS):
            controllers.start(testbed, controller, gate=True)


def seed_workloads() -> tuple[dict[str, Any], dict[str, Any]]:
    """The seeds' examples shrunk to the testbed beside each other: one group of the LWS on one clique, one slice of
    the DisaggregatedSet on the other."""
    lws: dict[str, Any] = yaml.safe_load(workloads.LWS_EXAMPLE.read_text())
    lws["spec"]["replicas"] = 1
    lws["spec"]["leaderWorkerTemplate"]["size"] = 2
    ds = workloads.ds_example()
    ds["spec"]["slices"] = 1
    return lws, ds


def test_upgrades_and_a_rollback_side_by_side_restart_nothing(upgrade: Upgrade, api: kube.Kube, ns: str) -> None:
    lws, ds = seed_workloads()
    workloads.create_lws(api, ns, lws)
    workloads.create_ds(api, ns, ds)
    workloads.wait_groups_running(api, ns, LWS, replicas=1, size=2)
    workloads.wait_slices_running(api, ns, DS, pods_per_slice={0: 5})
    first = observe(api, ns)
    refused_before = webhook_rejections(api)
    assert len(first.domains) == 2, testing.dump(workloads.summary(api, ns))

    def scale(replicas: int) -> Callable[[], None]:
        def edit() -> None:
            workloads.patch_lws(api, ns, LWS, {"spec": {"replicas": replicas}})
            wait_groups_admitted(api, ns, replicas)

        return edit

    def annotate(path: Callable[[], str], value: str) -> Callable[[], None]:
        def edit() -> None:
            api.patch(path(), {"metadata": {"annotations": {USER_ANNOTATION: value}}})

        return edit

    lws_path = lambda: workloads.lws_path(ns, LWS)  # noqa: E731
    ds_path = lambda: workloads.ds_path(ns, DS)  # noqa: E731
    old, new = baseline_version(), CURRENT

    upgrade.roll(
        new,
        one_by_one=True,
        edits={
            keys.LWS_CONTROLLER: (scale(2), annotate(lws_path, "upgrade-lws")),
            keys.DS_CONTROLLER: (annotate(ds_path, "upgrade-ds-old"), annotate(ds_path, "upgrade-ds-new")),
            keys.GUARDIAN_CONTROLLER: (scale(1), scale(2)),
        },
    )
    nothing_restarted(api, ns, first, refused_before, upgrade.steps)

    upgrade.roll(old, one_by_one=False, edits={keys.LWS_CONTROLLER: (scale(1), annotate(lws_path, "rollback"))})
    nothing_restarted(api, ns, first, refused_before, upgrade.steps)

    upgrade.roll(new, one_by_one=False, edits={keys.LWS_CONTROLLER: (scale(2), annotate(ds_path, "upgrade-again"))})
    nothing_restarted(api, ns, first, refused_before, upgrade.steps)


def wait_groups_admitted(api: kube.Kube, ns: str, replicas: int) -> None:
    """Until the LWS has exactly `replicas` leaders, each ungated with its claim and its domain existing, and no
    domain of a removed group is left. (A group beyond the first finds no free clique on the testbed, so its
    leader stays unscheduled: admission, not scheduling, is what an upgrade could break.)"""

    def admitted() -> bool:
        leaders = [
            p
            for p in workloads.lws_pods(api, ns, LWS)
            if p["metadata"]["labels"].get(keys.LWS_WORKER_INDEX_LABEL) == "0"
            and not p["metadata"].get("deletionTimestamp")
        ]
        found = workloads.domains(api, ns)
        lws_domains = {
            n for n, d in found.items() if d["metadata"]["labels"].get(keys.MANAGED_BY_LABEL) == keys.LWS_CONTROLLER
        }
        return (
            len(leaders) == replicas
            and all(workloads.claimed_containers(p) and not workloads.is_gated(p) for p in leaders)
            and {workloads.domain_of(p) for p in leaders} == lws_domains
        )

    testing.wait_for(
        admitted,
        what=f"{replicas} leaders of {LWS} admitted with their claims and domains",
        state=testing.state_of(lambda: workloads.summary(api, ns)),
        timeout=workloads.TIMEOUT,
    )


def nothing_restarted(
    api: kube.Kube, ns: str, first: Running, refused_before: dict[str, float], steps: list[str]
) -> None:
    now = observe(api, ns)
    step = steps[-1]
    assert {n: now.pods.get(n) for n in first.pods} == first.pods, f"{step}: a pod was recreated"
    assert {n: now.domains.get(n) for n in first.domains} == first.domains, f"{step}: a domain was deleted or recreated"
    revisions = {k: v for k, v in now.revisions.items() if k in first.revisions or k.startswith("ControllerRevision/")}
    assert revisions == first.revisions, (
        f"{step}: a workload's revision changed (a new stamp would roll every group; docs/upgrades.md)"
    )
    refused = {s: v - refused_before.get(s, 0.0) for s, v in webhook_rejections(api).items()}
    assert {s: v for s, v in refused.items() if v} == {}, f"{step}: mnnvl's webhooks failed or refused calls"
    for pod in testing.pods(api, ns):
        requests_gpus = any(
            "nvidia.com/gpu" in (c.get("resources") or {}).get("limits", {}) for c in pod["spec"]["containers"]
        )
        enrolled = (pod["metadata"].get("labels") or {}).get(keys.SCOPE_LABEL)
        if enrolled and requests_gpus:
            assert workloads.claimed_containers(pod), f"{step}: {pod['metadata']['name']} has no claim"
