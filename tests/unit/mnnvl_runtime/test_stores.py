"""Watch stores: complete before anyone decides (sync barrier), and no ghosts after a re-list."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from mnnvl_runtime import kube, stores

RESOURCE = stores.Resource(api_version="v1", plural="pods")


def body(uid: str, version: int, name: str | None = None) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": name or uid, "resourceVersion": str(version)}}


class Recorder:
    """The indexes behind a mirror: which objects it holds now, at which version."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}

    def apply(self, uid: str, found: Mapping[str, Any] | None) -> list[str]:
        if found is None:
            self.held.pop(uid, None)
        else:
            self.held[uid] = int(found["metadata"]["resourceVersion"])
        return [uid]


def mirror() -> tuple[stores.Mirror[str], Recorder]:
    recorder = Recorder()
    return stores.Mirror(RESOURCE, recorder.apply), recorder


def take_list(watched: stores.Mirror[str], items: list[dict[str, Any]], version: str) -> tuple[list[str], int]:
    """The list begun with `begin_list` arrives in one page."""
    touched = watched.take_page(items)
    dropped, ghosts = watched.finish_list(version)
    return touched + dropped, ghosts


def test_an_object_deleted_while_the_watch_was_away_is_dropped_by_the_next_list() -> None:
    """After a 410 and a re-list no DELETED event comes for what went in the gap: the list shows it is gone."""
    watched, recorder = mirror()
    watched.observe(body("a", 5), deleted=False)
    watched.observe(body("b", 6), deleted=False)
    watched.begin_list()
    touched, ghosts = take_list(watched, [body("b", 6)], "9")
    assert recorder.held == {"b": 6}
    assert (touched, ghosts) == (["a"], 1)


def test_an_object_seen_after_the_list_was_taken_is_kept() -> None:
    watched, recorder = mirror()
    watched.begin_list()
    watched.observe(body("new", 12), deleted=False)  # created after the list's snapshot at 10
    take_list(watched, [], "10")
    assert recorder.held == {"new": 12}


def test_a_deletion_seen_while_the_list_was_in_flight_is_not_undone_by_it() -> None:
    watched, recorder = mirror()
    watched.observe(body("a", 5), deleted=False)
    watched.begin_list()
    watched.observe(body("a", 7), deleted=True)
    take_list(watched, [body("a", 5)], "6")
    assert recorder.held == {}


def test_the_newer_of_an_event_and_a_list_wins() -> None:
    watched, recorder = mirror()
    watched.observe(body("a", 8), deleted=False)
    watched.begin_list()
    take_list(watched, [body("a", 7), body("b", 3)], "8")
    assert recorder.held == {"a": 8, "b": 3}
    watched.begin_list()
    take_list(watched, [body("a", 9), body("b", 3)], "9")
    assert recorder.held == {"a": 9, "b": 3}


def test_a_list_in_pages_drops_only_what_no_page_had_and_keeps_deletions_seen_between_pages() -> None:
    watched, recorder = mirror()
    for uid in "abcd":
        watched.observe(body(uid, 5), deleted=False)
    watched.begin_list()
    watched.take_page([body("a", 5), body("b", 5)])
    watched.observe(body("c", 7), deleted=True)  # deleted after the list's snapshot, before its page came
    watched.take_page([body("c", 5)])
    assert watched.finish_list("6") == (["d"], 1)
    assert recorder.held == {"a": 5, "b": 5}


def test_a_list_that_failed_midway_drops_nothing() -> None:
    watched, recorder = mirror()
    watched.observe(body("a", 5), deleted=False)
    watched.observe(body("b", 5), deleted=False)
    watched.begin_list()
    watched.take_page([body("a", 5)])
    watched.finish_list_aborted()
    watched.begin_list()
    assert take_list(watched, [body("a", 5), body("b", 5)], "6") == ([], 0)
    assert recorder.held == {"a": 5, "b": 5}


def test_an_event_older_than_what_a_list_gave_is_ignored() -> None:
    watched, recorder = mirror()
    watched.begin_list()
    take_list(watched, [body("a", 9)], "9")
    assert watched.observe(body("a", 8), deleted=False) == []
    assert recorder.held == {"a": 9}


class Lists:
    """Stands in for the client's paged list call; `gate` holds a list until released."""

    def __init__(self, answers: dict[str, list[dict[str, Any]]]) -> None:
        self.answers = answers
        self.gates: dict[str, asyncio.Event] = {plural: asyncio.Event() for plural in answers}

    async def alist_page(
        self, api_version: str, plural: str, *, label_selector: str | None = None, **_: str | None
    ) -> kube.Page:
        await self.gates[plural].wait()
        return kube.Page(items=self.answers[plural], resource_version="100")


def test_the_barrier_opens_only_once_every_store_holds_a_complete_list() -> None:
    async def scenario() -> None:
        pods, recorder_pods = mirror()
        domains_recorder = Recorder()
        domains = stores.Mirror(stores.Resource(api_version="v1", plural="domains"), domains_recorder.apply)
        lists = Lists({"pods": [body("p", 1)], "domains": [body("d", 2)]})
        touched: list[str] = []
        sync = stores.StoreSync(lists, [pods, domains], every=3600, touched=touched.extend)  # type: ignore[arg-type]
        task = asyncio.create_task(sync.run())
        lists.gates["pods"].set()
        await asyncio.wait_for(_until(lambda: bool(recorder_pods.held)), timeout=5)
        assert not sync.synced.is_set()  # pods are listed, domains not yet: no decision may be taken
        lists.gates["domains"].set()
        await asyncio.wait_for(sync.synced.wait(), timeout=5)
        assert (recorder_pods.held, domains_recorder.held, sorted(touched)) == ({"p": 1}, {"d": 2}, ["d", "p"])
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0)


def test_a_resync_asks_the_api_server_for_what_the_watch_selects() -> None:
    """Every page of a resync's list carries the resource's label and field selectors, so the list and the watch see
    the same objects: a tracked object the list leaves out is one the watch no longer sends."""
    asked: list[tuple[str, dict[str, str]]] = []
    pages: list[kube.Object] = [
        {"metadata": {"resourceVersion": "9", "continue": "next"}, "items": [body("a", 5)]},
        {"metadata": {"resourceVersion": "9"}, "items": []},
    ]

    def request(method: str, path: str, *, query: dict[str, str] | None = None, **_: Any) -> kube.Object:
        asked.append((path, dict(query or {})))
        return pages[len(asked) - 1]

    client = kube.Kube(None, field_manager="mnnvl-topology", max_workers=1)  # type: ignore[arg-type]
    client.request = request  # type: ignore[method-assign]
    live = "status.phase!=Failed,status.phase!=Succeeded"
    recorder = Recorder()
    watched = stores.Mirror(
        stores.Resource(api_version="v1", plural="pods", label_selector="example.com/scope", field_selector=live),
        recorder.apply,
    )
    watched.observe(body("finished", 4), deleted=False)
    sync = stores.StoreSync(client, [watched], every=3600, touched=lambda _: None)
    assert asyncio.run(sync.resync(watched))
    selected = {"labelSelector": "example.com/scope", "fieldSelector": live, "limit": str(kube.LIST_PAGE_SIZE)}
    assert asked == [("/api/v1/pods", selected), ("/api/v1/pods", selected | {"continue": "next"})]
    assert recorder.held == {"a": 5}
