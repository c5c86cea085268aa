"""The scope kit's pod webhook (`admission.register_pod_webhook`): the admission's patch, and the domain it names
started in the background, never for a dry run."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable
from typing import Any, cast

import kopf
import pytest

from mnnvl_api.decisions import injection
from mnnvl_runtime import admission, controller, webhooks

POD: dict[str, Any] = {"metadata": {"name": "w-0", "namespace": "serving"}, "spec": {"containers": []}}
ADMITTED = injection.PodAdmission(patch=[], errors=[], domain="w-0-bcdfg", gated=True)


def pod_webhook(started: list[tuple[dict[str, Any], injection.PodAdmission]]) -> Any:
    registry = kopf.OperatorRegistry()

    async def admit(context: controller.Context, pod: dict[str, Any]) -> injection.PodAdmission:
        return ADMITTED

    async def record(pod: dict[str, Any], admitted: injection.PodAdmission) -> None:
        started.append((pod, admitted))

    def start_domain(
        context: controller.Context, pod: dict[str, Any], admitted: injection.PodAdmission
    ) -> Awaitable[None] | None:
        return record(pod, admitted)

    admission.register_pod_webhook(registry, admit, start_domain=start_domain)
    (handler,) = [h for h in registry._webhooks.get_all_handlers() if h.id == webhooks.POD_WEBHOOK]
    return handler.fn


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_named_domain_is_started_unless_the_request_is_a_dry_run(dry_run: bool) -> None:
    started: list[tuple[dict[str, Any], injection.PodAdmission]] = []
    mutate_pod = pod_webhook(started)
    memo = types.SimpleNamespace(context=types.SimpleNamespace())

    async def request() -> None:
        await mutate_pod(
            body=kopf.Body(cast(kopf.RawBody, POD)), patch=kopf.Patch(), memo=memo, dryrun=dry_run, operation="CREATE"
        )
        await asyncio.gather(*(task for task in asyncio.all_tasks() if task is not asyncio.current_task()))

    asyncio.run(request())
    assert started == ([] if dry_run else [(POD, ADMITTED)])


def test_the_pod_webhook_declares_it_has_no_side_effects_on_dry_runs() -> None:
    configurations = webhooks.scope_configurations(
        "mnnvl-lws", lambda path: {"url": path}, scope="replica", mutating=[], validating=[]
    )
    (pod,) = configurations[0]["webhooks"]
    assert pod["sideEffects"] == "NoneOnDryRun"
