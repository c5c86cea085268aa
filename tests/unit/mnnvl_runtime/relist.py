"""Watch stores fed from a `MemoryApi`'s event log with some events lost, as a watch relist loses them: replayed
at once (`replay`), or read by a `Stream` at its own pace."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from mnnvl_runtime import stores

from . import memory_api
from .memory_api import MemoryApi, Object

#: (plural, event type, uid) of one recorded event
Event = tuple[str, str, str]


def replay(
    api: MemoryApi, mirrors: Mapping[str, stores.Mirror[Any]], *, lost: Callable[[Event], bool] = lambda _: False
) -> None:
    """Feed every event `api` recorded, in order, to the mirror of its resource (by plural), except the `lost` ones
    and those of resources without a mirror."""
    for plural, kind, body in api.events:
        mirror = mirrors.get(plural)
        if mirror is not None and not lost((plural, kind, body["metadata"]["uid"])):
            mirror.observe(body, deleted=kind == "DELETED")


@dataclasses.dataclass(kw_only=True)
class Stream:
    """One watch stream of one mirror: it reads the API's event log from `cursor` on, at the pace it is told, and
    sees only the events of its resource that its label selector matches."""

    api: MemoryApi
    mirror: stores.Mirror[Any]
    #: How far in the API's event log the stream has read.
    cursor: int
    #: Told the keys each event touched (`Mirror.observe`), as the controller's handler would queue them.
    touched: Callable[[list[Any]], None] = lambda keys: None

    def __post_init__(self) -> None:
        # An object leaving a field selection is a deletion on the watch, which the event log does not record: a
        # stream that ignored the selector would deliver what the API server never sends.
        if self.mirror.resource.field_selector is not None:
            raise ValueError(f"a stream applies label selectors only: {self.mirror.resource}")

    def pending(self) -> Iterator[tuple[int, str, Object]]:
        """The events the stream has not delivered yet: (position in the log, event type, object)."""
        resource = self.mirror.resource
        for position in range(self.cursor, len(self.api.events)):
            plural, kind, body = self.api.events[position]
            if plural == resource.plural and memory_api.selects(
                resource.label_selector, body["metadata"].get("labels") or {}
            ):
                yield position, kind, body

    def observe(self, body: Object, *, deleted: bool) -> None:
        """One event reaches the mirror."""
        self.touched(self.mirror.observe(body, deleted=deleted))

    def deliver(self, count: int) -> None:
        """Delivers the next `count` events (all of them at most)."""
        for delivered, (position, kind, body) in enumerate(self.pending()):
            if delivered == count:
                self.cursor = position
                return
            self.observe(body, deleted=kind == "DELETED")
        self.cursor = len(self.api.events)

    def drop(self, lost: int, *, redelivered: bool) -> None:
        """A 410: the stream resumes after losing up to `lost` of its events (all of them at most), never to see
        them; if `redelivered`, kopf delivers the objects that exist now (never the deletions it missed)."""
        skipped = [position for position, _, _ in self.pending()][:lost]
        if skipped:
            self.cursor = skipped[-1] + 1
        if redelivered:
            for body in self.api.all(self.mirror.resource.plural, self.mirror.resource.label_selector):
                self.observe(body, deleted=False)
