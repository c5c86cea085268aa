"""The `pre-delete` hook that refuses `helm uninstall` while something is left behind: rendered by default with
read-only RBAC created before its Job, the Job running `kubectl-mnnvl uninstall-check` for exactly the enabled
controllers that leave something behind, as restricted as the controllers; absent when turned off or when no such
controller is enabled. Its objects' schemas are checked with every other object's (test_rendering.py).

The `pre-upgrade` twin that checks the controllers a `helm upgrade` disables is rendered only where `lookup` finds
their Deployments, which needs a cluster: here it is checked that nothing renders without one, and its logic is
rendered by calling its template (`mnnvl.upgradeCheck`) with the Deployments `lookup` would have found, from a test
template added to a copy of the chart. The `lookup` call itself is not exercised here."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

import pytest
import yaml

from mnnvl_cli import __main__ as cli
from mnnvl_cli import uninstall
from mnnvl_testbed import chart

from .conftest import Render, one

NAME = "mnnvl-uninstall-check"
UPGRADE_NAME = "mnnvl-upgrade-check"
HOOK_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
BLOCKS = ("lws", "ds", "guardian")


def hook_objects(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pre-delete hooks, by kind."""
    return {item["kind"]: item for item in chart.hooks(objects, "pre-delete")}


def job_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [container] = one(objects, "Job", NAME)["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = container
    return found


def test_the_hook_is_rendered_by_default_rbac_first_and_kept_when_it_fails(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["defaults"]
    hooks = chart.hooks(objects, "pre-delete")
    assert [item["kind"] for item in hooks][-1] == "Job"  # the RBAC exists before the Job runs
    assert {item["kind"] for item in hooks} == HOOK_KINDS
    for item in hooks:
        assert item["metadata"]["name"] == NAME
        annotations = item["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        # Replaced by the next attempt, deleted once it passed; a failed Job stays for `kubectl logs`.
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    weights = {item["kind"]: int(item["metadata"]["annotations"]["helm.sh/hook-weight"]) for item in hooks}
    assert max(weights[kind] for kind in HOOK_KINDS - {"Job"}) < weights["Job"]
    assert chart.hook_events(one(objects, "Deployment", "mnnvl-lws")) == []


def test_the_hook_can_be_turned_off(render: Render) -> None:
    assert hook_objects(render(overrides={"uninstall": {"check": False}})) == {}


def test_without_a_controller_that_leaves_something_behind_there_is_no_hook(render: Render) -> None:
    topology_alone = render(
        overrides={
            "lws": {"enabled": False},
            "ds": {"enabled": False},
            "guardian": {"enabled": False},
            "topology": {"enabled": True, "kaiScheduler": {"installed": True}},
            "certs": {"mode": "none"},
        }
    )
    assert hook_objects(topology_alone) == {}


def test_the_hook_may_only_list_what_the_check_reads(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["all-on"]
    role = one(objects, "ClusterRole", NAME)
    granted = {
        (group, resource) for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
    }
    assert granted == {
        ("resource.nvidia.com", "computedomains"),
        ("", "pods"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("disaggregatedset.x-k8s.io", "disaggregatedsets"),
    }
    assert all(rule["verbs"] == ["list"] for rule in role["rules"])
    binding = one(objects, "ClusterRoleBinding", NAME)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": "mnnvl-system"}]
    assert one(objects, "ServiceAccount", NAME)["metadata"]["namespace"] == "mnnvl-system"


@pytest.mark.parametrize(
    ("enabled", "checked"),
    [
        pytest.param(("lws", "ds", "guardian"), ["mnnvl-lws", "mnnvl-ds", "mnnvl-guardian"], id="defaults"),
        pytest.param(("ds", "guardian"), ["mnnvl-ds", "mnnvl-guardian"], id="no-lws"),
        pytest.param(("guardian",), ["mnnvl-guardian"], id="guardian-alone"),
    ],
)
def test_the_job_checks_the_enabled_controllers_in_the_first_ones_image(
    render: Render, enabled: tuple[str, ...], checked: list[str]
) -> None:
    overrides: dict[str, Any] = {block: {"enabled": block in enabled} for block in ("lws", "ds", "guardian")}
    overrides[enabled[0]]["image"] = {"tag": "0.0.9"}
    objects = render(overrides=overrides)
    container = job_container(objects)
    expected = ["kubectl-mnnvl", "uninstall-check"]
    for controller in checked:
        expected += ["--controller", controller]
    assert container["command"] == expected
    assert container["image"] == "ghcr.io/mnnvl/mnnvl:0.0.9"
    # The command line is one the CLI accepts, for controllers it knows.
    arguments = cli.parser().parse_args(expected[1:])
    assert arguments.controllers == checked
    assert set(checked) <= set(uninstall.CONTROLLERS)


def test_the_job_runs_once_as_restricted_as_the_controllers(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["all-on"]
    job = one(objects, "Job", NAME)
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    controller = one(objects, "Deployment", "mnnvl-lws")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"] == controller["securityContext"]
    [controller_container] = controller["containers"]
    container = job_container(objects)
    assert container["securityContext"] == controller_container["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["resources"] == controller_container["resources"]


# --- the pre-upgrade check of disabling a controller ------------------------------------------------------------


def test_without_a_cluster_no_pre_upgrade_check_is_rendered() -> None:
    """`helm template --is-upgrade` (as a client-side dry run) disabling every controller: `lookup` finds no
    Deployment, so there is nothing to check, and the pre-delete hook is unchanged."""
    result = subprocess.run(
        [
            str(chart.helm()),
            "template",
            "mnnvl",
            str(chart.CHART_DIR),
            "--namespace",
            "mnnvl-system",
            "--is-upgrade",
            "--set",
            "ds.enabled=false,guardian.enabled=false",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    objects = [document for document in yaml.safe_load_all(result.stdout) if document]
    assert chart.hooks(objects, "pre-upgrade") == []
    assert job_container(objects)["command"] == ["kubectl-mnnvl", "uninstall-check", "--controller", "mnnvl-lws"]


@pytest.fixture
def with_deployed(tmp_path: pathlib.Path, render: Render) -> Render:
    """Render a copy of the chart whose one added template calls `mnnvl.upgradeCheck` with `deployed`, the blocks
    whose Deployment `lookup` would find; keyword arguments as `render` takes them."""

    def rendered_with(deployed: Sequence[str], **kwargs: Any) -> list[dict[str, Any]]:
        copy = shutil.copytree(chart.CHART_DIR, tmp_path / "mnnvl", dirs_exist_ok=True)
        found = " ".join(f'"{block}"' for block in deployed)
        (copy / "templates" / "zz-lookup-stand-in.yaml").write_text(
            f'{{{{- include "mnnvl.upgradeCheck" (dict "root" $ "deployed" (list {found})) }}}}\n'
        )
        return render(chart_dir=copy, **kwargs)

    return rendered_with


def upgrade_hooks(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["kind"]: item for item in chart.hooks(objects, "pre-upgrade")}


@pytest.mark.parametrize(
    ("deployed", "disabled", "checked"),
    [
        pytest.param(BLOCKS, ("guardian",), ["mnnvl-guardian"], id="guardian-disabled"),
        pytest.param(BLOCKS, ("lws", "ds"), ["mnnvl-lws", "mnnvl-ds"], id="lws-and-ds-disabled"),
        pytest.param(("lws", "guardian"), ("ds",), [], id="disabled-and-not-running"),
        pytest.param(BLOCKS, (), [], id="nothing-disabled"),
        pytest.param((), BLOCKS, [], id="nothing-running"),
    ],
)
def test_the_upgrade_check_checks_the_running_controllers_being_disabled(
    with_deployed: Render, deployed: tuple[str, ...], disabled: tuple[str, ...], checked: list[str]
) -> None:
    overrides: dict[str, Any] = {block: {"enabled": block not in disabled} for block in BLOCKS}
    if not set(BLOCKS) - set(disabled):
        overrides["topology"] = {"enabled": True, "kaiScheduler": {"installed": True}}
        overrides["certs"] = {"mode": "none"}
    hooks = upgrade_hooks(with_deployed(deployed, overrides=overrides))
    if not checked:
        assert hooks == {}
        return
    assert set(hooks) == HOOK_KINDS
    assert all(item["metadata"]["name"] == UPGRADE_NAME for item in hooks.values())
    [container] = hooks["Job"]["spec"]["template"]["spec"]["containers"]
    expected = ["kubectl-mnnvl", "uninstall-check"]
    for controller in checked:
        expected += ["--controller", controller]
    assert container["command"] == expected


def test_the_upgrade_check_can_be_turned_off(with_deployed: Render) -> None:
    overrides = {"guardian": {"enabled": False}, "uninstall": {"check": False}}
    assert upgrade_hooks(with_deployed(BLOCKS, overrides=overrides)) == {}


def test_the_upgrade_check_is_the_uninstall_check_of_the_controllers_it_checks(with_deployed: Render) -> None:
    """Disabling lws by upgrade runs what uninstalling a release of lws alone runs, under its own names: the same
    list-only rules, pod and container, hook weights and delete policy. (The testbed's `release.check_uninstall`
    runs the latter for the former, having no `lookup`.)"""
    tuned = {"image": {"tag": "0.0.9"}, "resources": {"limits": {"memory": "99Mi"}}, "nodeSelector": {"pool": "a"}}
    upgrading = upgrade_hooks(with_deployed(BLOCKS, overrides={"lws": {"enabled": False, **tuned}}))
    lws_alone = hook_objects(
        with_deployed(
            (), overrides={"lws": {"enabled": True, **tuned}, "ds": {"enabled": False}, "guardian": {"enabled": False}}
        )
    )
    assert set(upgrading) == set(lws_alone) == HOOK_KINDS

    def renamed(item: dict[str, Any]) -> Any:
        """The object with the pre-delete hook's names and event, to compare the rest."""
        text = yaml.safe_dump(item).replace(UPGRADE_NAME, NAME).replace("upgrade-check", "uninstall-check")
        return yaml.safe_load(text.replace("helm.sh/hook: pre-upgrade", "helm.sh/hook: pre-delete"))

    for kind in HOOK_KINDS:
        assert renamed(upgrading[kind]) == lws_alone[kind], kind
    [container] = upgrading["Job"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/mnnvl/mnnvl:0.0.9"
    assert container["resources"]["limits"]["memory"] == "99Mi"
    assert upgrading["Job"]["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "a"}
