"""The ClusterRoles grant at least what each controller's start-up preflight checks it may do, so a controller
installed by the chart with the gate on never stops at its own preflight for want of a permission."""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_runtime import preflight

from .conftest import by_kind


def entry_point(controller: str) -> ModuleType:
    with warnings.catch_warnings():
        # mnnvl_guardian.admission still passes kopf's deprecated `operation=`; importing it only warns.
        warnings.filterwarnings("ignore", "operation= is deprecated", DeprecationWarning)
        return importlib.import_module(f"mnnvl_{controller}.__main__")


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
    module = entry_point(controller)
    wanted = [
        preflight.Access(
            group=keys.COMPUTE_DOMAIN_GROUP, resource=keys.COMPUTE_DOMAIN_PLURAL, verbs=module.COMPUTE_DOMAIN_VERBS
        ),
        *getattr(module, "READS", ()),
    ]
    rules = by_kind(rendered["all-on"], "ClusterRole")[f"mnnvl-{controller}"]["rules"]
    missing = [
        f"{verb} {access.resource}.{access.group}"
        for access in wanted
        for verb in access.verbs
        if not granted(rules, access.group, access.resource, verb)
    ]
    assert missing == []
