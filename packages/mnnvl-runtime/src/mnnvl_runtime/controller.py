"""What one controller process shares with its handlers and loops: its `Context` (kopf's `memo.context`), the
selectors of its watches, and the loops it runs for good, which the liveness probe watches
(`watch_tasks`). The process bootstrap (`operator`) makes them; everything else only reads them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from mnnvl_api import models

from . import identity, kube, leases, settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class Context:
    """What handlers of one controller share, handed to them as kopf's `memo.context`."""

    identity: identity.Identity
    process: settings.ProcessSettings
    configuration: models.Configuration
    client: kube.Kube
    elector: leases.LeaderElector

    @property
    def gate_enabled(self) -> bool:
        return self.configuration.auto_compute_domain


def context_of(memo: Any) -> Context:
    """The controller's context from a handler's `memo` kwarg."""
    found: Context = memo.context
    return found


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchSelector:
    """The selectors the API server applies to one resource's watch (and the stores' lists of it, which select the
    same objects). Both are passed through as written; kopf joins them to any others with "and"."""

    labels: str | None = None
    #: On the fields the API server indexes for the resource (for pods: `status.phase`, `spec.nodeName`, ...).
    fields: str | None = None


#: The selectors the API server applies to a controller's watches, by resource as kopf's handler decorators name it
#: ("pods", or (group, version, plural)): objects no handler would accept are then never sent at all, which is what
#: keeps a controller's watch cost independent of the cluster's other pods.
WatchSelectors = Mapping[str | tuple[str, str, str], WatchSelector]


#: The loops this process runs for good, as `watch_tasks` registered them; one process runs one controller.
_WATCHED_TASKS: list[asyncio.Task[Any]] = []


def watch_tasks(*tasks: asyncio.Task[Any]) -> None:
    """Have the liveness endpoint fail once any of `tasks` ends, whether it returned, raised or was cancelled:
    each is a loop the controller needs for as long as the process runs."""
    _WATCHED_TASKS.extend(tasks)


def watched_tasks() -> tuple[asyncio.Task[Any], ...]:
    return tuple(_WATCHED_TASKS)


#: The cache-sync barriers of this process's watch stores, by the kind they reconcile, as `watch_store_sync`
#: registered them: the readiness probe waits for every one.
_STORE_SYNCS: dict[str, asyncio.Event] = {}


def watch_store_sync(kind: str, synced: asyncio.Event) -> None:
    """Have the readiness endpoint wait until `synced` is set: the stores reconciling `kind` hold a full list."""
    _STORE_SYNCS[kind] = synced


def store_syncs() -> dict[str, bool]:
    """Whether each registered store sync has filled its stores, by kind."""
    return {kind: synced.is_set() for kind, synced in _STORE_SYNCS.items()}


def check_tasks_running(tasks: Iterable[asyncio.Task[Any]]) -> dict[str, int]:
    """The liveness probe's verdict on `tasks`: how many run, or kopf.PermanentError naming those that ended
    (the health endpoint answers it with HTTP 500)."""
    checked = list(tasks)
    ended = [_ending(task) for task in checked if task.done()]
    if ended:
        raise kopf.PermanentError(f"controller loops ended: {'; '.join(ended)}")
    return {"running": len(checked)}


def _ending(task: asyncio.Task[Any]) -> str:
    if task.cancelled():
        return f"{task.get_name()} was cancelled"
    error = task.exception()
    return f"{task.get_name()} returned" if error is None else f"{task.get_name()} died: {error!r}"
