"""The `pre-delete` hook that refuses `helm uninstall` while something is left behind: rendered by default with
read-only RBAC created before its Job, the Job running `kubectl-mnnvl uninstall-check` for exactly the enabled
controllers that leave something behind, as restricted as the controllers; absent when turned off or when no such
controller is enabled. Its objects' schemas are checked with every other object's (test_rendering.py)."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_cli import __main__ as cli
from mnnvl_cli import uninstall
from mnnvl_testbed import chart

from .conftest import Render, one

NAME = "mnnvl-uninstall-check"
HOOK_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}


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
