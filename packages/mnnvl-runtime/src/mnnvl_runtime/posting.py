"""Kubernetes Events on workloads: what a platform engineer sees in `kubectl describe`."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Hashable, Iterator
from typing import Any

from . import kube

log = logging.getLogger(__name__)


class Once:
    """What a process has said already, so that each thing is said once: the last `remembered` keys, the oldest
    forgotten first (then said again if it comes up again)."""

    def __init__(self, remembered: int) -> None:
        self.remembered = remembered
        self._said: dict[Hashable, None] = {}

    def first(self, key: Hashable) -> bool:
        """True the first time `key` comes up (and remembers it); False while it is remembered."""
        if key in self._said:
            return False
        self._said[key] = None
        if len(self._said) > self.remembered:
            del self._said[next(iter(self._said))]
        return True

    def clear(self) -> None:
        """Forget everything: what comes up next is said again."""
        self._said.clear()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._said

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._said)

    def __len__(self) -> int:
        return len(self._said)


def event_for(involved: kube.Object, *, reason: str, message: str, warning: bool, component: str) -> kube.Object:
    """A core/v1 Event about `involved`, from `component`."""
    meta = involved["metadata"]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace") or "default"},
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "eventTime": None,
        "count": 1,
    }


async def post(client: kube.Api, event: kube.Object) -> None:
    """Record an event; a failure to record one is logged, never raised (events are best effort)."""
    namespace = event["metadata"]["namespace"]
    try:
        await client.arequest("POST", kube.path_of("v1", "events", namespace=namespace), body=event)
    except kube.ApiError as error:  # an error status, or no answer at all (`kube.UnreachableError`)
        fields: dict[str, Any] = {"reason": event["reason"], "error": str(error)}
        log.warning("event not recorded", extra=fields)
