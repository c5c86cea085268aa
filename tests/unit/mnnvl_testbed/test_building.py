"""The binary cache shared by processes (tests and a demo with state directories of their own): one builds a tool
while the others wait for it."""

from __future__ import annotations

import contextlib
import fcntl
import pathlib
from collections.abc import Iterator

import pytest

from mnnvl_testbed import building, versions


@pytest.fixture(autouse=True)
def cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setenv("MNNVL_TESTBED_CACHE", str(tmp_path))
    return tmp_path


def test_a_binary_being_built_is_locked_against_every_other_process() -> None:
    lock = building.lock_path(versions.HELM)
    # Another open file of the lock stands for another process.
    with building.building(versions.HELM), lock.open("w") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with lock.open("w") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the build


def test_a_binary_another_process_built_while_this_one_waited_is_not_built_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []

    @contextlib.contextmanager
    def waited_for_the_other(tool: versions.GoTool) -> Iterator[None]:
        target = building.binary_path(tool)
        target.parent.mkdir(parents=True)
        target.write_text("built by the other process")
        yield

    monkeypatch.setattr(building, "building", waited_for_the_other)
    monkeypatch.setattr(building, "_build", lambda tool, target: built.append(tool.name))
    paths = building.ensure_binaries((versions.HELM,))
    assert (built, paths[versions.HELM.name].read_text()) == ([], "built by the other process")


def test_a_missing_binary_is_built_once_under_its_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []

    def build(tool: versions.GoTool, target: pathlib.Path) -> None:
        with building.lock_path(tool).open("w") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        built.append(tool.name)
        target.parent.mkdir(parents=True)
        target.write_text("built")

    monkeypatch.setattr(building, "_build", build)
    building.ensure_binaries((versions.HELM,))
    building.ensure_binaries((versions.HELM,))
    assert built == [versions.HELM.name]
