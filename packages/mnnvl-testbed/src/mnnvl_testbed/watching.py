"""The chaos watcher's own watches: one HTTP watch per collection, all namespaces, as cluster-admin, each feeding the
pure `invariants.Watcher` under one lock.

A stream lists, then watches from the list's resourceVersion with bookmarks; a broken stream (the API server
restarting, etcd paused) resumes from the last resourceVersion it delivered; only a 410 Gone re-lists, and the
re-list tells the watcher which pods vanished meanwhile. Nothing here uses the controllers' code or clients.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from mnnvl_api import keys

from . import cluster, invariants, workloads

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], list[invariants.Violation]]


class Monitor:
    """The watcher behind a lock, with a log line for every violation the moment it is found."""

    def __init__(self, watcher: invariants.Watcher, *, ignore: Callable[[invariants.Violation], bool]) -> None:
        self.watcher = watcher
        self.lock = threading.Lock()
        self.relists = 0
        self._ignore = ignore

    def call(self, decide: Callable[..., list[invariants.Violation]], *args: Any) -> None:
        """`decide(*args)` under the lock; its violations logged (those of the run's own canaries left out)."""
        with self.lock:
            found = decide(*args)
        for violation in found:
            if not self._ignore(violation):
                log.error("VIOLATION %s at revision %s: %s (%s)", violation.invariant, violation.moment,
                          violation.detail, ", ".join(violation.objects))  # fmt: skip


class Stream(threading.Thread):
    def __init__(
        self,
        testbed: cluster.Testbed,
        collection: str,
        monitor: Monitor,
        on_event: Callable[[invariants.Watcher], Handler],
        *,
        on_relist: Callable[[invariants.Watcher, int, int, set[str]], list[invariants.Violation]] | None = None,
        on_progress: bool = False,
    ) -> None:
        super().__init__(name=f"watch {collection}", daemon=True)
        self.collection = collection
        self.monitor = monitor
        self._on_event = on_event
        self._on_relist = on_relist
        self._on_progress = on_progress
        self._host, self._port = urllib.parse.urlsplit(testbed.server).netloc.split(":")
        pki = testbed.state_dir / "pki"
        self._context = ssl.create_default_context(cafile=str(testbed.ca_cert))
        self._context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.stopping = threading.Event()
        self.listed = threading.Event()
        self.version = ""
        #: The last resourceVersion delivered before the current re-list (0: the first list).
        self.since = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                if not self.version:
                    self._list()
                self._watch()
            except Exception as error:  # the watcher must outlive anything a broken stream raises
                log.info("watch of %s broke (%s); resuming from %s", self.collection, error, self.version)
                self.stopping.wait(0.5)

    def _get(self, query: dict[str, str], timeout: float) -> http.client.HTTPResponse:
        connection = http.client.HTTPSConnection(self._host, int(self._port), context=self._context, timeout=timeout)
        connection.request("GET", f"{self.collection}?{urllib.parse.urlencode(query)}")
        return connection.getresponse()

    def _list(self) -> None:
        response = self._get({}, timeout=60)
        body = json.loads(response.read())
        if response.status != 200:
            raise ValueError(f"list {self.collection}: {response.status} {body.get('message')}")
        version = int(body["metadata"]["resourceVersion"])
        present = set()
        handle = self._on_event(self.monitor.watcher)
        if self._on_relist is not None and self.since:
            self.monitor.call(self._on_relist_start, self.since)
        for item in body["items"]:
            present.add(item["metadata"]["uid"])
            self.monitor.call(handle, invariants.LISTED, item)
        if self._on_relist is not None:
            self.monitor.call(self._on_relist, self.monitor.watcher, self.since, version, present)
        self.version = str(version)
        self.listed.set()

    def _watch(self) -> None:
        query = {"watch": "1", "resourceVersion": self.version, "allowWatchBookmarks": "true", "timeoutSeconds": "60"}
        response = self._get(query, timeout=90)
        if response.status == 410:  # the version is too old to resume from: events since are lost, re-list
            self._expired()
            return
        if response.status != 200:
            raise ValueError(f"watch {self.collection}: {response.status} {response.read()[:200]!r}")
        handle = self._on_event(self.monitor.watcher)
        while not self.stopping.is_set():
            line = response.readline()
            if not line or self.stopping.is_set():  # what comes after the run ended is not judged
                return
            event = json.loads(line)
            kind, obj = event["type"], event["object"]
            if kind == "ERROR":
                if obj.get("code") == 410:
                    self._expired()
                return
            self.version = str(obj["metadata"]["resourceVersion"])
            if kind == "BOOKMARK":
                if self._on_progress:
                    self.monitor.call(self.monitor.watcher.progress, int(self.version))
                continue
            self.monitor.call(handle, kind, obj)

    def _expired(self) -> None:
        self.monitor.relists += 1
        self.since = int(self.version or 0)
        self.version = ""

    def _on_relist_start(self, since: int) -> list[invariants.Violation]:
        if self.collection.endswith(keys.COMPUTE_DOMAIN_PLURAL):
            self.monitor.watcher.relisting_domains(since)
        return []


def streams(testbed: cluster.Testbed, monitor: Monitor, *, topologies: bool) -> list[Stream]:
    """Pods, ComputeDomains, the owners between them, and KAI Topologies where served."""
    cd_path = f"/apis/{workloads.CD_API}/{keys.COMPUTE_DOMAIN_PLURAL}"
    found = [
        Stream(testbed, "/api/v1/pods", monitor, lambda w: w.on_pod, on_relist=_pods_relisted, on_progress=True),
        Stream(testbed, cd_path, monitor, lambda w: w.on_domain, on_relist=_domains_relisted),
        Stream(testbed, "/apis/apps/v1/statefulsets", monitor, lambda w: w.on_owner),
        Stream(testbed, f"/apis/{workloads.LWS_API}/leaderworkersets", monitor, lambda w: w.on_owner),
    ]
    if topologies:
        topology_path = f"/apis/{keys.KAI_TOPOLOGY_API_VERSION}/{keys.KAI_TOPOLOGY_PLURAL}"
        found.append(
            Stream(
                testbed,
                topology_path,
                monitor,
                lambda w: lambda event, obj: w.on_foreign(keys.KAI_TOPOLOGY_PLURAL, obj, event),
            )
        )
    return found


def _domains_relisted(
    watcher: invariants.Watcher, since: int, version: int, present: set[str]
) -> list[invariants.Violation]:
    return watcher.relisted_domains(version, present)


def _pods_relisted(
    watcher: invariants.Watcher, since: int, version: int, present: set[str]
) -> list[invariants.Violation]:
    return watcher.relisted_pods(since, version, present)


@contextlib.contextmanager
def watching(testbed: cluster.Testbed, monitor: Monitor, *, topologies: bool, timeout: float = 60) -> Any:
    """Every stream running, each past its first list, for the body; stopped afterwards."""
    running = streams(testbed, monitor, topologies=topologies)
    for stream in running:
        stream.start()
    deadline = time.monotonic() + timeout
    for stream in running:
        if not stream.listed.wait(max(deadline - time.monotonic(), 0.1)):
            raise TimeoutError(f"the watcher's first list of {stream.collection} did not finish in {timeout:.0f}s")
    try:
        yield running
    finally:
        for stream in running:
            stream.stopping.set()
