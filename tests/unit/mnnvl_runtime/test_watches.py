"""Watches declared once: a store's mirror yields its kopf handler, the handler's label filter and the selectors the
API server applies (`mnnvl_runtime.watches`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import kopf
import pytest

from mnnvl_runtime import controller, stores, watches

POD = stores.Resource(api_version="v1", plural="pods", label_selector="example.com/scope=slice")
DOMAIN = stores.Resource(api_version="resource.nvidia.com/v1beta1", plural="computedomains")
LIVE = "status.phase!=Failed,status.phase!=Succeeded"


@pytest.mark.parametrize(
    ("selector", "value", "expected"),
    [
        pytest.param("example.com/scope", "anything", True, id="presence"),
        pytest.param("example.com/scope=slice", "slice", True, id="equal"),
        pytest.param("example.com/scope=slice", "replica", False, id="not-equal"),
        pytest.param("example.com/by in (a,b)", "b", True, id="in-set"),
        pytest.param("example.com/by in (a,b)", "c", False, id="not-in-set"),
    ],
)
def test_a_selector_becomes_the_label_filter_kopf_applies(selector: str, value: str, expected: bool) -> None:
    (key, matcher) = watches.label_filter(selector).popitem()
    assert key == selector.split("=", maxsplit=1)[0].split(" in ", maxsplit=1)[0]
    if matcher is kopf.PRESENT:
        assert expected
    elif callable(matcher):
        assert matcher(value=value) is expected
    else:
        assert (matcher == value) is expected


def test_terms_split_outside_parentheses_only() -> None:
    found = watches.label_filter("a in (x,y),b=c,d")
    assert sorted(found) == ["a", "b", "d"]
    assert (found["a"](value="y"), found["a"](value="c")) == (True, False)
    assert (found["b"], found["d"]) == ("c", kopf.PRESENT)


def test_register_declares_one_handler_per_mirror_and_returns_the_selectors() -> None:
    registry = kopf.OperatorRegistry()
    applied: list[tuple[str, bool]] = []

    def apply(uid: str, body: Mapping[str, Any] | None) -> list[str]:
        applied.append((uid, body is None))
        return [f"key-of-{uid}"]

    mirrors = [stores.Mirror(POD, apply), stores.Mirror(DOMAIN, apply)]
    queued: list[list[str]] = []
    also = {"computedomains": lambda body, deleted: ["also"] if deleted else []}
    selectors = watches.register(registry, mirrors, queued.append, also=also)
    assert selectors == {"pods": controller.WatchSelector(labels="example.com/scope=slice")}
    handlers: dict[str, Any] = {str(handler.id): handler for handler in registry._watching.get_all_handlers()}
    assert sorted(handlers) == ["computedomains", "pods"]
    assert handlers["pods"].labels == {"example.com/scope": "slice"}
    assert handlers["computedomains"].labels is None

    def body(uid: str) -> kopf.Body:
        return kopf.Body({"metadata": {"uid": uid, "resourceVersion": "1", "name": uid, "namespace": "ns"}})

    asyncio.run(handlers["pods"].fn(body=body("p"), type="ADDED"))
    asyncio.run(handlers["computedomains"].fn(body=body("d"), type="DELETED"))
    assert applied == [("p", False), ("d", True)]
    assert queued == [["key-of-p"], ["key-of-d", "also"]]


def test_a_core_resource_is_named_by_its_plural_and_any_other_by_group_version_plural() -> None:
    assert watches.selector_key(POD) == "pods"
    assert watches.selector_key(DOMAIN) == ("resource.nvidia.com", "v1beta1", "computedomains")


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param(
            stores.Resource(api_version="v1", plural="pods", field_selector=LIVE),
            controller.WatchSelector(fields=LIVE),
            id="fields-only",
        ),
        pytest.param(
            stores.Resource(api_version="v1", plural="pods", label_selector="example.com/scope", field_selector=LIVE),
            controller.WatchSelector(labels="example.com/scope", fields=LIVE),
            id="both",
        ),
    ],
)
def test_a_field_selector_reaches_the_watch_selectors_and_filters_nothing_client_side(
    resource: stores.Resource, expected: controller.WatchSelector
) -> None:
    """The API server alone applies a field selector (the handler gets no filter for it): nothing the watch sends
    fails it, not even the deletion reporting that a pod left the selection, which carries the pod as it was."""
    registry = kopf.OperatorRegistry()
    selectors = watches.register(registry, [stores.Mirror(resource, lambda uid, body: [])], lambda keys: None)
    assert selectors == {"pods": expected}
    (handler,) = registry._watching.get_all_handlers()
    assert (handler.field, handler.value, handler.when) == (None, None, None)
