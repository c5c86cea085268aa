"""The admission policies (templates/admissionpolicy.yaml): one per controller and resource it writes, bound with
Deny, matching only that controller's rendered ServiceAccount, spelling the keys the controllers write as
mnnvl_api.keys does; none with admissionPolicy.enabled=false. What they refuse is tested on the testbed
(e2e/test_admission_policy.py); kubeconform validates them with every rendering (test_rendering.py)."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_topology import census_writer, effects

from .conftest import Render, by_kind

#: The resources each controller writes, as the chart names its policies (`<component>-<resource>`).
WRITES = {
    "lws": ("pods", "computedomains"),
    "ds": ("pods", "computedomains", "disaggregatedsets"),
    "guardian": ("computedomains",),
    "topology": ("topologies", "clustertopologybindings", "configmaps"),
}
CONTROLLERS = ("lws", "ds", "guardian", "topology")
#: Every controller enabled (topology is off by default, and needs KAI Scheduler).
EVERY_CONTROLLER = {"topology": {"enabled": True, "kaiScheduler": {"installed": True}}}


def policies(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return by_kind(objects, "ValidatingAdmissionPolicy")


def service_account_user(objects: list[dict[str, Any]], component: str) -> str:
    """The user name the API server gives the rendered ServiceAccount of `component`."""
    [account] = [
        item
        for item in by_kind(objects, "ServiceAccount").values()
        if item["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_each_enabled_controller_gets_a_policy_per_resource_it_writes(render: Render, controller: str) -> None:
    overrides: dict[str, Any] = {name: {"enabled": name == controller} for name in CONTROLLERS}
    overrides["topology"]["kaiScheduler"] = {"installed": True}
    if controller == "topology":
        overrides["certs"] = {"mode": "none"}
    objects = render(overrides=overrides)
    expected = {f"mnnvl-{controller}-{resource}" for resource in WRITES.get(controller, ())}
    assert set(policies(objects)) == expected
    bindings = by_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert {name: binding["spec"] for name, binding in bindings.items()} == {
        name: {"policyName": name, "validationActions": ["Deny"]} for name in expected
    }


def test_turned_off_no_policy_is_rendered(render: Render) -> None:
    objects = render(overrides={"admissionPolicy": {"enabled": False}})
    assert not policies(objects)
    assert not by_kind(objects, "ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize(
    ("release", "namespace", "overrides"),
    [
        pytest.param("mnnvl", "mnnvl-system", {}, id="defaults"),
        pytest.param("gpu", "platform", {"fullnameOverride": "nvlink"}, id="renamed"),
    ],
)
def test_each_policy_matches_only_its_controllers_service_account_first(
    render: Render, release: str, namespace: str, overrides: dict[str, Any]
) -> None:
    objects = render(release=release, namespace=namespace, overrides={**EVERY_CONTROLLER, **overrides})
    found = policies(objects)
    assert len(found) == sum(map(len, WRITES.values()))
    for policy in found.values():
        component = policy["metadata"]["labels"]["app.kubernetes.io/component"]
        user = service_account_user(objects, component)
        # Evaluated before anything else, so requests by every other user cost one comparison.
        assert policy["spec"]["matchConditions"] == [
            {"name": f"by-{user.rsplit(':', 1)[1]}", "expression": f'request.userInfo.username == "{user}"'}
        ]
        assert policy["spec"]["failurePolicy"] == "Fail"


def expressions(policy: dict[str, Any]) -> str:
    spec = policy["spec"]
    return "\n".join(item["expression"] for item in [*spec.get("variables", []), *spec["validations"]])


@pytest.mark.parametrize(
    ("policy", "written"),
    [
        pytest.param(
            "mnnvl-lws-pods", (keys.SCHEDULING_GATE, keys.SCOPE_LABEL, f'== "{keys.SCOPE_REPLICA}"'), id="lws-pods"
        ),
        pytest.param(
            "mnnvl-ds-pods", (keys.SCHEDULING_GATE, keys.SCOPE_LABEL, f'== "{keys.SCOPE_SLICE}"'), id="ds-pods"
        ),
        pytest.param(
            "mnnvl-lws-computedomains",
            (
                keys.MANAGED_BY_LABEL,
                keys.OWNER_UID_LABEL,
                keys.CONDEMNED_ANNOTATION,
                keys.PROTECTION_FINALIZER,
                f'"{keys.LWS_CONTROLLER}"',
            ),
            id="lws-computedomains",
        ),
        pytest.param(
            "mnnvl-ds-computedomains",
            (
                keys.MANAGED_BY_LABEL,
                keys.OWNER_UID_LABEL,
                keys.CONDEMNED_ANNOTATION,
                keys.PROTECTION_FINALIZER,
                f'"{keys.DS_CONTROLLER}"',
            ),
            id="ds-computedomains",
        ),
        pytest.param("mnnvl-ds-disaggregatedsets", (keys.RECONCILE_REQUESTED_ANNOTATION,), id="ds-disaggregatedsets"),
        pytest.param(
            "mnnvl-guardian-computedomains",
            (
                keys.MANAGED_BY_LABEL,
                keys.OWNER_UID_LABEL,
                keys.PROTECTION_FINALIZER,
                str(list(keys.DOMAIN_MANAGERS)).replace("'", '"'),
                f'"{keys.GUARDIAN_CONTROLLER}"',
            ),
            id="guardian-computedomains",
        ),
    ],
)
def test_the_policies_spell_the_keys_the_controllers_write(
    rendered: dict[str, list[dict[str, Any]]], policy: str, written: tuple[str, ...]
) -> None:
    text = expressions(policies(rendered["defaults"])[policy])
    for key in written:
        assert key in text, f"{policy} does not name {key}"


@pytest.mark.parametrize(
    ("release", "namespace"),
    [pytest.param("mnnvl", "mnnvl-system", id="defaults"), pytest.param("gpu", "platform", id="renamed")],
)
def test_the_topology_policies_spell_what_mnnvl_topology_writes(render: Render, release: str, namespace: str) -> None:
    objects = render(release=release, namespace=namespace, overrides=EVERY_CONTROLLER)
    found = {
        policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"][0]: policy
        for policy in policies(objects).values()
        if policy["metadata"]["labels"]["app.kubernetes.io/component"] == "topology"
    }
    assert sorted(found) == sorted(WRITES["topology"])
    # The installation the chart's Configuration gives the controller, which it records on what it creates.
    installation = f"{namespace}/{release}"
    for resource in ("topologies", "clustertopologybindings"):
        text = expressions(found[resource])
        for written in (keys.MANAGED_BY_LABEL, keys.INSTALLATION_ANNOTATION, f'"{keys.TOPOLOGY_CONTROLLER}"'):
            assert written in text, f"{resource} does not name {written}"
        assert f'== "{installation}"' in text
    census = expressions(found["configmaps"])
    for written in (f'"{effects.CENSUS_CONFIGMAP}"', f'"{census_writer.CENSUS_KEY}"', f'== "{namespace}"'):
        assert written in census, f"configmaps does not name {written}"
