"""Upgrading mnnvl, and rolling it back, restarts nothing (docs/upgrades.md).

The release is first installed from the chart and code of the baseline commit (`baseline.UPGRADE_BASELINE`), two
replicas per controller (the guardian with its Deny webhook, so that it serves webhooks too), and runs the seeds'
two workloads. Then `helm upgrade` to this tree, controller by controller; `helm rollback` to the baseline, all at
once; and `helm upgrade` again, all at once. Each controller's Deployment rolls as with two replicas (one new replica
up, then one old one down), so an old and a new replica run side by side. During each controller's first overlap the
workloads are edited as users do (scaled, annotated with keys that are not mnnvl's): once with the webhooks at the
old replica, once at the new one, and, controller by controller, once more with the Lease handed to the new replica
and the webhooks back at the old one. Each serving replica must have answered some of the edit's admissions.

After each step nothing restarted: no pod recreated, no domain deleted or recreated, no new revision of any
workload, no call to mnnvl's webhooks failed or was refused, the pods created meanwhile have their claims, two
replicas of each controller run the step's version, and none logged an error.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import pathlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import baseline, chart, cluster, controllers, processes, release, testing

from . import workloads

LWS = "deepseek-r1"
DS = "llm-serving"
#: Rolled in this order controller by controller; the order a platform team would pick is not prescribed.
CONTROLLERS = (keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER)
#: The annotation a user adds to the workloads meanwhile: not mnnvl's, so it must change no revision.
USER_ANNOTATION = "example.com/on-call"
#: What the holder logs when `Upgrade.hand_lease` takes its Lease away: expected here.
HANDED_OVER = '"message": "lease taken by another replica, stepping down"'
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


@dataclasses.dataclass(frozen=True)
class Overlap:
    """The edits made during a controller's first overlap of an old and a new replica."""

    #: With the webhooks at the old replica (while an old replica leads).
    old_serves: Edit | None = None
    #: With the webhooks at the new replica.
    new_serves: Edit | None = None
    #: With the Lease handed to the new replica and the webhooks back at the old one: the old version admits what
    #: the new one reconciles.
    new_leads: Edit | None = None


class Upgrade:
    """The testbed's mnnvl release being moved between versions. Each controller's webhooks point at one replica at
    a time, moved to a new replica before an old one stops, as a Service's endpoints follow a rolling update."""

    def __init__(self, testbed: cluster.Testbed, api: kube.Kube) -> None:
        self.testbed, self.api = testbed, api
        self.steps: list[str] = []
        self.logs = {path: path.stat().st_size for path in self._logs()}

    def install(self, version: Version) -> None:
        release.upgrade(self.testbed, version.chart_dir)
        for controller in reversed(CONTROLLERS):
            # The guardian's Deny webhook, so that it too serves webhooks (the default protection has none).
            extra: dict[str, object] | None = (
                {"computeDomain": {"deletionProtection": "Deny"}} if controller == keys.GUARDIAN_CONTROLLER else None
            )
            controllers.start(self.testbed, controller, replicas=2, sources=version.sources, extra_config=extra)

    def serve(self, controller: str, replica: controllers.Replica, edit: Edit) -> None:
        """`edit` with `controller`'s webhooks at `replica`, which must answer some of its calls."""
        controllers.point_webhooks_at(self.testbed, replica, controller)
        before = workloads.admissions(replica)
        edit()
        assert workloads.admissions(replica) > before, (
            f"{replica.name} answered none of the admissions of {edit.__name__}"
        )

    def hand_lease(self, controller: str, to: controllers.Replica) -> None:
        """The Lease handed to `to`, as if its holder had stopped renewing: the holder's next renewal sees another
        holder and steps down."""
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        path = kube.path_of("coordination.k8s.io/v1", "leases", namespace=controllers.NAMESPACE, name=controller)
        self.api.request(
            "PATCH", path, body={"spec": {"holderIdentity": to.name, "renewTime": now}}, content_type=kube.MERGE_PATCH
        )
        others = [r for r in controllers.running_replicas(self.testbed, controller) if r != to]
        testing.wait_for(
            lambda: workloads.lease_held(to) and not any(workloads.lease_held(r) for r in others),
            what=f"{to.name} alone to lead",
            timeout=60,
        )

    def roll(self, version: Version, *, one_by_one: bool, edits: dict[str, Overlap]) -> None:
        """`helm upgrade` (or rollback) to `version`: the chart first, then the Deployments, controller by controller
        or all at once; `edits[controller]` are made during that controller's first overlap of old and new."""
        release.upgrade(self.testbed, version.chart_dir)

        def roll_one(controller: str) -> None:
            pending = [edits.get(controller, Overlap())]

            def overlap(old: controllers.Replica, new: controllers.Replica) -> None:
                if not pending:
                    return
                made = pending.pop()
                if made.old_serves is not None:
                    self.serve(controller, old, made.old_serves)
                if made.new_serves is not None:
                    self.serve(controller, new, made.new_serves)
                if made.new_leads is not None:
                    self.hand_lease(controller, new)
                    self.serve(controller, old, made.new_leads)

            controllers.roll(self.testbed, controller, sources=version.sources, overlap=overlap)

        if one_by_one:
            for controller in CONTROLLERS:
                roll_one(controller)
        else:
            with concurrent.futures.ThreadPoolExecutor(len(CONTROLLERS)) as pool:
                for done in [pool.submit(roll_one, controller) for controller in CONTROLLERS]:
                    done.result()
        self.steps.append(f"{'controller by controller' if one_by_one else 'all at once'} to {version.name}")
        self.replicas_healthy(version)

    def replicas_healthy(self, version: Version) -> None:
        """Two replicas of each controller run `version`, alive, and no replica logged an error since the start."""
        supervisor = processes.Supervisor(self.testbed.state_dir)
        for controller in CONTROLLERS:
            up = controllers.started_replicas(self.testbed, controller)
            assert [(r.sources, supervisor.alive(r.name)) for r in up] == [(version.sources, True)] * 2, (
                f"{self.steps[-1]}: {controller}'s replicas: {up}"
            )
        errors = [
            f"{path.name}: {line}"
            for path in self._logs()
            for line in path.read_bytes()[self.logs.get(path, 0) :].decode(errors="replace").splitlines()
            if ('"level": "error"' in line or '"level": "critical"' in line or "Traceback" in line)
            and HANDED_OVER not in line
        ]
        assert errors == [], f"{self.steps[-1]}: the controllers logged errors"

    def _logs(self) -> list[pathlib.Path]:
        return [
            path for controller in CONTROLLERS for path in (self.testbed.state_dir / "logs").glob(f"{controller}-*.log")
        ]


@pytest.fixture
def upgrade(
    testbed: cluster.Testbed, api: kube.Kube, ns: str, lws_controller: list[controllers.Replica]
) -> Iterator[Upgrade]:
    """The release at the baseline version, two replicas per controller; afterwards back to this tree with one
    replica each, as the session's controllers run, whatever failed."""
    moving = Upgrade(testbed, api)
    try:
        moving.install(baseline_version())
        yield moving
    finally:
        # Each step runs even if one before it fails (an ExitStack runs its callbacks last first): the chart, then
        # the controllers in the order the session started them.
        with contextlib.ExitStack() as restarts:
            for controller in CONTROLLERS:
                restarts.callback(controllers.start, testbed, controller, gate=True)
            restarts.callback(release.upgrade, testbed, chart.CHART_DIR)


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

    def scale(*counts: int) -> Edit:
        """The LWS scaled to each count in turn, each time until its leaders are admitted and its domains follow."""

        def edit() -> None:
            for replicas in counts:
                workloads.patch_lws(api, ns, LWS, {"spec": {"replicas": replicas}})
                wait_groups_admitted(api, ns, replicas)

        edit.__name__ = f"scaling {LWS} to {counts}"
        return edit

    def scale_prefill(replicas: int) -> Edit:
        def edit() -> None:
            path = "/spec/roles/0/spec/replicas"
            api.patch(
                workloads.ds_path(ns, DS),
                [{"op": "replace", "path": path, "value": replicas}],
                content_type=kube.JSON_PATCH,
            )
            wait_prefill_admitted(api, ns, replicas)

        edit.__name__ = f"scaling {DS}'s prefill to {replicas}"
        return edit

    def annotate(path: str, value: str) -> Edit:
        def edit() -> None:
            api.patch(path, {"metadata": {"annotations": {USER_ANNOTATION: value}}})

        edit.__name__ = f"annotating {path}"
        return edit

    lws_path, ds_path = workloads.lws_path(ns, LWS), workloads.ds_path(ns, DS)
    old, new = baseline_version(), CURRENT

    upgrade.roll(
        new,
        one_by_one=True,
        edits={
            keys.LWS_CONTROLLER: Overlap(scale(2), annotate(lws_path, "upgrade"), scale(1)),
            keys.DS_CONTROLLER: Overlap(scale_prefill(2), annotate(ds_path, "upgrade"), scale_prefill(1)),
            # The guardian answers domain deletions only: each edit deletes the domain of a group it adds.
            keys.GUARDIAN_CONTROLLER: Overlap(scale(2, 1), scale(2, 1), scale(2, 1)),
        },
    )
    nothing_restarted(api, ns, first, refused_before, upgrade.steps)

    upgrade.roll(
        old,
        one_by_one=False,
        edits={
            keys.LWS_CONTROLLER: Overlap(scale(2), annotate(lws_path, "rollback")),
            keys.DS_CONTROLLER: Overlap(scale_prefill(2), annotate(ds_path, "rollback")),
        },
    )
    nothing_restarted(api, ns, first, refused_before, upgrade.steps)

    upgrade.roll(
        new,
        one_by_one=False,
        edits={
            keys.LWS_CONTROLLER: Overlap(scale(1), annotate(lws_path, "upgrade-again")),
            keys.DS_CONTROLLER: Overlap(scale_prefill(1), annotate(ds_path, "upgrade-again")),
        },
    )
    nothing_restarted(api, ns, first, refused_before, upgrade.steps)


def wait_prefill_admitted(api: kube.Kube, ns: str, replicas: int) -> None:
    """Until the DisaggregatedSet's prefill role has `replicas` groups of pods, each ungated with its claim and in
    the slice's one domain (like an added LWS group, an added role group finds no free node here)."""

    def admitted() -> bool:
        pods = [
            p
            for p in workloads.ds_pods(api, ns, DS)
            if workloads.role_of(p) == "prefill" and not p["metadata"].get("deletionTimestamp")
        ]
        return (
            len(pods) == 2 * replicas
            and all(workloads.claimed_containers(p) and not workloads.is_gated(p) for p in pods)
            and len({workloads.domain_of(p) for p in pods}) == 1
        )

    testing.wait_for(
        admitted,
        what=f"{replicas} prefill groups of {DS} admitted with their claims",
        state=testing.state_of(lambda: workloads.ds_summary(api, ns, DS)),
        timeout=workloads.TIMEOUT,
    )


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
