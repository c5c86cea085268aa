"""The slice scope's follow-up of each pass (`mnnvl_runtime.scopes.FollowUp`): asks upstream to reconcile a
DisaggregatedSet again when a cause of refusing its LeaderWorkerSets went away (`planner.upstream_retry_due`)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable

from mnnvl_api import keys
from mnnvl_api.decisions import patches
from mnnvl_runtime import kube

from . import planner

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Memory:
    uid: str
    asked_this_term: bool = False
    holders: frozenset[str] = frozenset()


class UpstreamRetries:
    """Remembers, per DisaggregatedSet incarnation, whether upstream was asked to reconcile it again in this Lease
    term and which domains held its slices back in the last pass; asks when `planner.upstream_retry_due` says so,
    by setting `RECONCILE_REQUESTED_ANNOTATION` (any change of the set queues it upstream, ahead of its back-off)."""

    def __init__(
        self,
        client: kube.Api,
        *,
        may_write: Callable[[], bool],
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.client = client
        self.may_write = may_write
        self.now = now
        self._memory: dict[tuple[str, str], _Memory] = {}

    def on_domain_deleted(self, namespace: str, domain: str) -> list[tuple[str, str]]:
        """The DisaggregatedSets (namespace, name) whose slices a domain of this name held back in their last pass:
        its deletion is news for them, though it names none of them."""
        return sorted(key for key, memory in self._memory.items() if key[0] == namespace and domain in memory.holders)

    def on_lease_change(self, leading: bool) -> None:
        if leading:  # a new term: this replica may come back from an outage that refused child LeaderWorkerSets
            for memory in self._memory.values():
                memory.asked_this_term = False

    async def after(self, snapshot: planner.Snapshot) -> None:
        key = (snapshot.namespace, snapshot.workload_name)
        workload = snapshot.workload
        if workload is None:
            self._memory.pop(key, None)
            return
        memory = self._memory.get(key)
        if memory is None or memory.uid != workload.uid:
            memory = self._memory[key] = _Memory(uid=workload.uid)
        due = planner.upstream_retry_due(snapshot, asked_this_term=memory.asked_this_term, held_before=memory.holders)
        memory.holders = planner.holders(snapshot)
        if due and self.may_write():
            await self._ask(snapshot.namespace, snapshot.workload_name, workload.uid)
            memory.asked_this_term = True

    async def _ask(self, namespace: str, name: str, uid: str) -> None:
        requested_at = self.now().isoformat(timespec="seconds").replace("+00:00", "Z")

        def change(current: kube.Object) -> kube.JsonPatch | None:
            meta = current.get("metadata") or {}
            if meta.get("uid") != uid:
                return None  # another incarnation of the name: it was never refused as this one
            return [
                {"op": "test", "path": "/metadata/uid", "value": uid},
                *patches.set_annotation(meta, keys.RECONCILE_REQUESTED_ANNOTATION, requested_at),
            ]

        path = kube.path_of(keys.DS_API_VERSION, keys.DS_PLURAL, namespace=namespace, name=name)
        if await self.client.amodify(path, change) is not None:
            log.info(
                "asked upstream to reconcile the DisaggregatedSet again",
                extra={"namespace": namespace, "disaggregatedset": name},
            )
