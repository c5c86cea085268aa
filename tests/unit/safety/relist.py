"""Watch stores fed from a `MemoryApi`'s event log with some events lost, as a watch relist loses them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mnnvl_runtime import stores

from .memory_api import MemoryApi

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
