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

from collections.abc import Hashable, Mapping
from typing import Any, Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")
ObjectKey = str  # metadata.uid
#: How new an object is: (resourceVersion, creationTimestamp); -1 and "" where the object does not say.
Version = tuple[int, str]
UNVERSIONED: Version = (-1, "")


def object_key(body: Mapping[str, Any]) -> ObjectKey:
    """The identity of one object incarnation: its uid, which the API server assigns to every object."""
    uid: str = body["metadata"]["uid"]
    return uid


def version_of(body: Mapping[str, Any]) -> Version:
    """How new `body` is. Of two objects that held one name, the later one was created after the earlier one was
    gone, so its resourceVersion is the larger; the creation time orders them where versions are not known."""
    meta = body.get("metadata") or {}
    version = str(meta.get("resourceVersion") or "")
    return (int(version) if version.isdigit() else -1, str(meta.get("creationTimestamp") or ""))


class Index(Generic[Key, Value]):
    def __init__(self) -> None:
        self._by_key: dict[Key, dict[ObjectKey, Value]] = {}
        self._keys_of: dict[ObjectKey, tuple[Key, ...]] = {}
        self._versions: dict[ObjectKey, Version] = {}

    def put(self, obj: ObjectKey, contributions: Mapping[Key, Value], *, version: Version = UNVERSIONED) -> None:
        """Replace everything `obj` contributes with `contributions` (empty: nothing); `version`: how new `obj` is
        (`version_of`), which `newest` orders by."""
        self.drop(obj)
        for key, value in contributions.items():
            self._by_key.setdefault(key, {})[obj] = value
        if contributions:
            self._keys_of[obj] = tuple(contributions)
            self._versions[obj] = version

    def drop(self, obj: ObjectKey) -> None:
        self._versions.pop(obj, None)
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

    def newest(self, key: Key) -> Value | None:
        """The value under `key` of the newest object contributing to it (by `version`; of equal ones, the first).

        For a key that names one object (namespace, name), two incarnations meet between the successor's first
        event and the predecessor's deletion event, and for as long as a watch relist hides that deletion (until
        the next fresh list drops the ghost). The successor is the one that exists: never answer with the first
        one seen.
        """
        found = self.get(key)
        if not found:
            return None
        newest = max(found, key=lambda obj: self._versions.get(obj, UNVERSIONED))
        return found[newest]

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def groups(self) -> list[Key]:
        """Every key some object contributes to."""
        return list(self._by_key)

    def objects(self) -> int:
        return len(self._keys_of)
