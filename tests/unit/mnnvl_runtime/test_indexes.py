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


def test_newest_prefers_the_incarnation_that_is_not_going_away() -> None:
    index: indexes.Index[str, tuple[str, bool]] = indexes.Index()
    index.put("old", {"ns/d": ("old", True)})
    assert index.newest("ns/d", going=lambda value: value[1]) == ("old", True)
    index.put("new", {"ns/d": ("new", False)})
    assert index.newest("ns/d", going=lambda value: value[1]) == ("new", False)
    assert index.newest("ns/other", going=lambda value: value[1]) is None
