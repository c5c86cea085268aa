from __future__ import annotations

from mnnvl_runtime import indexes


def test_an_update_replaces_everything_an_object_contributed() -> None:
    index: indexes.Index[str, int] = indexes.Index()
    index.put("uid-a", {"x": 1, "y": 1})
    index.put("uid-b", {"x": 2})
    assert index.get("x") == {"uid-a": 1, "uid-b": 2}
    index.put("uid-a", {"z": 3})
    assert index.get("x") == {"uid-b": 2}
    assert "y" not in index
    assert index.groups_of("uid-a") == ("z",)


def test_a_deletion_drops_the_object_and_empty_keys() -> None:
    index: indexes.Index[str, int] = indexes.Index()
    index.put("uid-a", {"x": 1})
    index.drop("uid-a")
    assert index.get("x") == {}
    assert index.groups() == []
    assert index.objects() == 0
    assert index.first("x") is None


def test_events_of_two_incarnations_of_one_name_commute() -> None:
    """A late deletion of an old pod must not erase its same-named successor (kopf orders events per uid only)."""
    old = {"metadata": {"name": "lws-0", "uid": "old"}}
    new = {"metadata": {"name": "lws-0", "uid": "new"}}
    index: indexes.Index[str, str] = indexes.Index()
    index.put(indexes.object_key(new), {"domain": "d-new"})
    index.put(indexes.object_key(old), {"domain": "d-old"})
    index.drop(indexes.object_key(old))
    assert index.get("domain") == {"new": "d-new"}


def versioned(uid: str, version: str, created: str = "2026-11-30T00:00:00Z") -> dict[str, object]:
    return {"metadata": {"uid": uid, "resourceVersion": version, "creationTimestamp": created}}


def test_newest_is_the_newest_object_not_the_first_one_seen() -> None:
    """A stale incarnation (its deletion hidden by a relist) is seen first; its successor is the one that exists."""
    index: indexes.Index[str, str] = indexes.Index()
    index.put("old", {"ns/d": "old"}, version=indexes.version_of(versioned("old", "5")))
    assert index.newest("ns/d") == "old"
    index.put("new", {"ns/d": "new"}, version=indexes.version_of(versioned("new", "12")))
    assert index.newest("ns/d") == "new"
    index.put("old", {"ns/d": "old"}, version=indexes.version_of(versioned("old", "9")))  # a late event of the old
    assert index.newest("ns/d") == "new"
    index.drop("new")
    assert index.newest("ns/d") == "old"
    assert index.newest("ns/other") is None


def test_newest_orders_by_creation_where_versions_are_unknown() -> None:
    index: indexes.Index[str, str] = indexes.Index()
    later = {"metadata": {"uid": "b", "creationTimestamp": "2026-11-30T00:00:09Z"}}
    index.put("b", {"k": "later"}, version=indexes.version_of(later))
    index.put("a", {"k": "earlier"}, version=indexes.version_of(versioned("a", "", "2026-11-30T00:00:01Z")))
    assert index.newest("k") == "later"
    assert indexes.version_of({"metadata": {}}) == indexes.UNVERSIONED
