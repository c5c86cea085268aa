"""What every scope's interleaving harness shares: one controller (stores, planner, executor with the shared domain
writer) and a second replica's webhook in front of an in-memory API server, the driver behind it.

`ScopeMachine` holds the machinery: controller starts and restarts that lose all memory, watch events delivered
to each store at its own lag, re-lists, admissions begun and persisted (or abandoned) as separate steps within an
admission deadline shorter than the deletion fence, the clock the fence reads, and the safety invariants that
do not depend on the scope. A scope's harness adds its workloads, its pods' creators, its reconciliation and
its own invariants.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

import jsonpatch
import kopf
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mnnvl_api import keys, names
from mnnvl_api.decisions import injection
from mnnvl_runtime import domains, stores

from . import memory_api
from .memory_api import MemoryApi, Object

NS = "serving"
FENCE = 10.0
#: Longest time from the webhook's reads to the pod being persisted; must be below the fence.
MAX_ADMISSION = 3.0
GPU = {"name": "vllm", "image": "vllm", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}


class WatchStores(Protocol):
    """A scope's `state.Stores`, as far as feeding it goes."""

    @property
    def mirrors(self) -> list[stores.Mirror[stores.NamespacedName]]: ...


StoresT = TypeVar("StoresT", bound=WatchStores)
ExecutorT = TypeVar("ExecutorT")


class ScopeMachine(RuleBasedStateMachine, Generic[StoresT, ExecutorT]):
    """A scope's subclass creates its workload and `foreign`, then calls `_start_controller`."""

    #: A look-alike: named as we would name a domain and labelled as ours, but created by someone else.
    foreign: Object

    def __init__(
        self,
        *,
        component: str,
        scope: str,
        new_stores: Callable[[], StoresT],
        new_executor: Callable[[domains.DomainWriter], ExecutorT],
    ) -> None:
        super().__init__()
        self.component = component
        self.scope = scope
        self.new_stores = new_stores
        self.new_executor = new_executor
        self.loop = asyncio.new_event_loop()
        self.api = MemoryApi()
        self.now = 0.0
        #: Admissions begun and not ended yet: (deadline, the admitted pod).
        self.pending: list[tuple[float, Object]] = []
        self.webhook_stores, self.webhook_cursor = new_stores(), 0

    def teardown(self) -> None:
        self.loop.close()

    def _start_controller(self) -> None:
        """A (re)started controller remembers nothing: its stores see only what happens from now on, until a
        re-list."""
        self.stores = self.new_stores()
        self.cursor = len(self.api.events)
        writer = domains.DomainWriter(
            self.api.client(self.component),
            component=self.component,
            scope=self.scope,
            fence_seconds=FENCE,
            clock=lambda: self.now,
        )
        self.executor = self.new_executor(writer)

    def _put_foreign_look_alike(self, name: str, labels: dict[str, str]) -> Object:
        return self.api.put(
            keys.COMPUTE_DOMAIN_PLURAL,
            {
                "metadata": {"name": name, "namespace": NS, "labels": labels},
                "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
            },
            manager="kubectl",
        )

    def _deliver(self, watcher: StoresT, cursor: int, count: int) -> int:
        """Feeds `watcher` the next `count` watch events after `cursor`; returns the new cursor."""
        mirrors = {mirror.resource.plural: mirror for mirror in watcher.mirrors}
        for plural, kind, body in self.api.events[cursor : cursor + count]:
            mirror = mirrors.get(plural)
            if mirror is not None:
                mirror.observe(body, deleted=kind == "DELETED")
        return min(cursor + count, len(self.api.events))

    # --- pods: admission begun, then persisted or abandoned ----------------------------------------------

    def _pod(self, name: str) -> Object | None:
        return self.api.get("pods", NS, name)

    def _pod_fails(self, name: str) -> None:
        self.api.update("pods", NS, name, lambda b: b["status"].__setitem__("phase", "Failed"))

    def _delete_pod(self, name: str) -> None:
        if self._pod(name) is not None:
            self.api.delete("pods", NS, name)

    def _is_pending(self, name: str) -> bool:
        return any(p["metadata"]["name"] == name for _, p in self.pending)

    def _admit(self, body: Object, admitting: Coroutine[Any, Any, injection.PodAdmission]) -> None:
        """Runs the webhook's decision on `body`; an admitted pod is persisted later, by its deadline at most."""
        try:
            admitted = self.loop.run_until_complete(admitting)
        except kopf.AdmissionError:
            return  # refused or deferred: the creator tries again later
        self.pending.append((self.now + MAX_ADMISSION, jsonpatch.apply_patch(body, admitted.patch)))

    def _take_pending(self, data: st.DataObject) -> Object:
        _, body = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        return body

    def _persist(self, body: Object) -> Object | None:
        """The API server creates the admitted pod; returns it, or None when the name is taken (the create is
        refused). A scope adds what the pod's creator does next."""
        if self._pod(body["metadata"]["name"]) is not None:
            return None
        return self.api.put("pods", body, manager="kube-controller-manager")

    def persist_named(self, name: str) -> None:
        """For scripted scenarios: persist the pending admission of pod `name`."""
        (entry,) = [p for p in self.pending if p[1]["metadata"]["name"] == name]
        self.pending.remove(entry)
        self._persist(entry[1])

    @rule(seconds=st.sampled_from((0.5, 2.0, 5.0, 12.0)))
    def time_passes(self, seconds: float) -> None:
        """Admissions due meanwhile end first: at the last moment, the worst case for a fence."""
        self.now += seconds
        for due in [p for p in self.pending if p[0] <= self.now]:
            self.pending.remove(due)
            self._persist(due[1])

    # --- the controller and a second replica's webhook, each behind the API by its own lag ----------------
    # A scope makes the catching up rules with its own lags.

    def controller_watch_catches_up(self, count: int) -> None:
        self.cursor = self._deliver(self.stores, self.cursor, count)

    def webhook_watch_catches_up(self, count: int) -> None:
        self.webhook_cursor = self._deliver(self.webhook_stores, self.webhook_cursor, count)

    @rule()
    def controller_relists(self) -> None:
        """Every mirror takes a fresh list, in pages (so that lists cross page boundaries), and drops what the
        list no longer has."""
        version = str(max(int(b["metadata"]["resourceVersion"]) for _, _, b in self.api.events))
        for mirror in self.stores.mirrors:
            mirror.begin_list()
            listed = self.api.all(mirror.resource.plural)
            for start in range(0, len(listed), memory_api.PAGE_SIZE):
                mirror.take_page(listed[start : start + memory_api.PAGE_SIZE])
            mirror.finish_list(version)

    @rule()
    def controller_restarts(self) -> None:
        self._start_controller()

    # --- what must hold after every step, whatever the scope ---------------------------------------------

    @invariant()
    def no_domain_is_torn_down_under_a_pod(self) -> None:
        assert [t for t in self.api.teardowns if t.users] == []

    @invariant()
    def a_foreign_look_alike_is_never_written(self) -> None:
        found = self.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, self.foreign["metadata"]["name"])
        assert found is not None
        assert found["metadata"]["resourceVersion"] == self.foreign["metadata"]["resourceVersion"]

    # --- for scripted scenarios --------------------------------------------------------------------------

    def is_condemned(self, domain: str) -> bool:
        """Whether `domain`, which must still exist, carries the condemned mark."""
        found = self.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, domain)
        assert found is not None, f"{domain} is gone"
        return keys.CONDEMNED_ANNOTATION in found["metadata"]["annotations"]
