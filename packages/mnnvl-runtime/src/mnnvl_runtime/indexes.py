"""In-memory indexes fed by watch events: O(1) per event, O(1) per lookup.

Each watched object contributes values under any number of keys (as `kopf.index` does); an update replaces
all of an object's contributions, a deletion drops them.

Objects are identified by their uid, not their name: kopf handles each object incarnation in its own worker,
so the events of a deleted pod and of its same-named successor (LeaderWorkerSet reuses pod names) may be
handled in either order. Keyed by name, a late event of the old pod would erase or overwrite the new one.

Only `async` handlers may feed an index: kopf runs them on the event loop thread, which the reconcile loop
shares, so no locking is needed (kopf runs sync handlers in a thread pool).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")
ObjectKey = str  # metadata.uid


def object_key(body: Mapping[str, Any]) -> ObjectKey:
    """The identity of one object incarnation: its uid, which the API server assigns to every object."""
    uid: str = body["metadata"]["uid"]
    return uid


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

    def newest(self, key: Key, *, going: Callable[[Value], bool]) -> Value | None:
        """The value under `key`, preferring one for which `going` is false.

        For a key that names one object (namespace, name), two incarnations meet only between the successor's
        first event and the predecessor's deletion event; the one still alive is the one that counts.
        """
        found = self.get(key).values()
        return next((value for value in found if not going(value)), next(iter(found), None))

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def groups(self) -> list[Key]:
        """Every key some object contributes to."""
        return list(self._by_key)

    def objects(self) -> int:
        return len(self._keys_of)
