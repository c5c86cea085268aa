"""Saying each thing once (`posting.Once`), as the domain writer's and mnnvl-topology's Warnings do."""

from __future__ import annotations

from mnnvl_runtime import posting


def test_each_thing_is_said_once_while_remembered() -> None:
    once = posting.Once(remembered=2)
    assert once.first("a")
    assert not once.first("a")
    assert once.first("b")
    assert "a" in once
    assert list(once) == ["a", "b"]


def test_the_oldest_is_forgotten_first_and_said_again() -> None:
    once = posting.Once(remembered=2)
    for key in ("a", "b", "c"):
        assert once.first(key)
    assert len(once) == 2
    assert "a" not in once
    assert once.first("a")
    assert not once.first("c")


def test_clear_forgets_everything() -> None:
    once = posting.Once(remembered=8)
    once.first("a")
    once.clear()
    assert once.first("a")
