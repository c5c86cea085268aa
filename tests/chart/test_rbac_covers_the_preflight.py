"""The ClusterRoles grant at least what each controller's start-up preflight checks it may do, so a controller
installed by the chart with the gate on never stops at its own preflight for want of a permission."""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_runtime import preflight, scopes

from .conftest import by_kind


def entry_point(controller: str) -> ModuleType:
    with warnings.catch_warnings():
        # mnnvl_guardian.admission still passes kopf's deprecated `operation=`; importing it only warns.
        warnings.filterwarnings("ignore", "operation= is deprecated", DeprecationWarning)
        return importlib.import_module(f"mnnvl_{controller}.__main__")


def preflight_accesses(controller: str) -> list[preflight.Access]:
    """What the controller's start-up check asks for, with the gate on: a scope controller's from its `Scope`."""
    if controller in ("lws", "ds"):
        scope: scopes.Scope[Any, Any] = importlib.import_module(f"mnnvl_{controller}.scope").SCOPE
        verbs, reads = scopes.COMPUTE_DOMAIN_VERBS, scope.reads
    else:
        verbs, reads = entry_point(controller).COMPUTE_DOMAIN_VERBS, ()
    return [preflight.Access(group=keys.COMPUTE_DOMAIN_GROUP, resource=keys.COMPUTE_DOMAIN_PLURAL, verbs=verbs), *reads]


def granted(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule["apiGroups"]
        and resource in rule["resources"]
        and verb in rule["verbs"]
        and "resourceNames" not in rule
        for rule in rules
    )


@pytest.mark.parametrize("controller", ["lws", "ds", "guardian"])
def test_each_controllers_cluster_role_grants_what_its_preflight_checks(
    rendered: dict[str, list[dict[str, Any]]], controller: str
) -> None:
    wanted = preflight_accesses(controller)
    rules = by_kind(rendered["all-on"], "ClusterRole")[f"mnnvl-{controller}"]["rules"]
    missing = [
        f"{verb} {access.resource}.{access.group}"
        for access in wanted
        for verb in access.verbs
        if not granted(rules, access.group, access.resource, verb)
    ]
    assert missing == []
