from __future__ import annotations

from mnnvl_runtime import indexes


def test_an_update_replaces_everything_an_object_contributed() -> None:
    index: indexes.Index[str, int] = indexes.Index()
    index.put(("ns", "a"), {"x": 1, "y": 1})
    index.put(("ns", "b"), {"x": 2})
    assert index.get("x") == {("ns", "a"): 1, ("ns", "b"): 2}
    index.put(("ns", "a"), {"z": 3})
    assert index.get("x") == {("ns", "b"): 2}
    assert "y" not in index
    assert index.groups_of(("ns", "a")) == ("z",)


def test_a_deletion_drops_the_object_and_empty_keys() -> None:
    index: indexes.Index[str, int] = indexes.Index()
    index.put(("ns", "a"), {"x": 1})
    index.drop(("ns", "a"))
    assert index.get("x") == {}
    assert index.groups() == []
    assert index.objects() == 0
    assert index.first("x") is None
