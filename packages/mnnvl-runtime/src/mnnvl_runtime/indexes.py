"""In-memory indexes fed by watch events: O(1) per event, O(1) per lookup.

Each watched object contributes values under any number of keys (as `kopf.index` does); an update replaces
all of an object's contributions, a deletion drops them. Handlers and the reconcile loop share one event
loop thread, so no locking is needed.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")
ObjectKey = tuple[str, str]  # (namespace, name); cluster-scoped objects use "" as namespace


class Index(Generic[Key, Value]):
    def __init__(self) -> None:
        self._by_key: dict[Key, dict[ObjectKey, Value]] = {}
        self._keys_of: dict[ObjectKey, tuple[Key, ...]] = {}

    def put(self, obj: ObjectKey, contributions: Mapping[Key, Value]) -> None:
        """Replace everything `obj` contributes with `contributions` (empty: nothing)."""
        self.drop(obj)
        for key, value in contributions.items():
            self._by_key.setdefault(key, {})[obj] = value
        if contributions:
            self._keys_of[obj] = tuple(contributions)

    def drop(self, obj: ObjectKey) -> None:
        for key in self._keys_of.pop(obj, ()):
            bucket = self._by_key[key]
            bucket.pop(obj, None)
            if not bucket:
                del self._by_key[key]

    def get(self, key: Key) -> dict[ObjectKey, Value]:
        return self._by_key.get(key, {})

    def groups_of(self, obj: ObjectKey) -> tuple[Key, ...]:
        """The keys `obj` contributes to."""
        return self._keys_of.get(obj, ())

    def first(self, key: Key) -> Value | None:
        return next(iter(self.get(key).values()), None)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def groups(self) -> list[Key]:
        """Every key some object contributes to."""
        return list(self._by_key)

    def objects(self) -> int:
        return len(self._keys_of)
