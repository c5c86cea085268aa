"""Lease leader election (`coordination.k8s.io/v1`): every replica serves webhooks and keeps its indexes
warm; only the holder of the controller's Lease writes.

Expiry is judged by when this replica last saw the Lease change (as client-go does), not by comparing
clocks across machines. A holder that cannot renew within `renew_deadline` steps down before its Lease can
expire, so two replicas never both believe they lead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

from . import kube, metrics

log = logging.getLogger(__name__)
LEASE_API = "coordination.k8s.io/v1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timing:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: kube.Kube,
        *,
        namespace: str,
        name: str,
        holder: str,
        timing: Timing = Timing(),
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.holder = holder
        self.timing = timing
        self.on_change = on_change
        self._leading = False
        self._observed_record: tuple[str | None, str | None] = (None, None)
        self._observed_at = 0.0
        self._last_renewal = 0.0
        self.leading_event = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def path(self) -> str:
        return kube.path_of(LEASE_API, "leases", namespace=self.namespace, name=self.name)

    async def run(self) -> None:
        """Try to acquire, then keep renewing, until cancelled; releases the Lease on the way out."""
        try:
            while True:
                try:
                    await asyncio.to_thread(self._attempt)
                except (kube.ApiError, OSError) as error:
                    log.warning("lease attempt failed", extra={"lease": self.name, "error": str(error)})
                if self._leading and time.monotonic() - self._last_renewal > self.timing.renew_deadline:
                    log.error("lease renewal deadline passed, stepping down", extra={"lease": self.name})
                    self._set_leading(False)
                await asyncio.sleep(self.timing.retry_period)
        finally:
            if self._leading:
                await asyncio.to_thread(self._release)
                self._set_leading(False)

    def lead_without_lease(self) -> None:
        """For a single replica run with leader election off."""
        self._set_leading(True)

    def _attempt(self) -> None:
        lease = self.client.get(LEASE_API, "leases", self.name, namespace=self.namespace)
        if lease is None:
            self._create()
            return
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"))
        now = time.monotonic()
        if record != self._observed_record:
            self._observed_record, self._observed_at = record, now
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
        expired = not holder or now - self._observed_at > duration
        if holder != self.holder and not expired:
            self._set_leading(False)
            return
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.holder else 1)
        acquired = spec.get("acquireTime") if holder == self.holder else _now()
        updated = {
            **lease,
            "spec": {
                **spec,
                "holderIdentity": self.holder,
                "leaseDurationSeconds": int(self.timing.lease_duration),
                "acquireTime": acquired,
                "renewTime": _now(),
                "leaseTransitions": transitions,
            },
        }
        # PUT carries the resourceVersion read above: a concurrent writer makes this a 409.
        try:
            written = self.client.request("PUT", self.path, body=updated)
        except kube.ApiError as error:
            if error.status != 409:
                raise
            current = self.client.get(LEASE_API, "leases", self.name, namespace=self.namespace)
            if current is None or (current.get("spec") or {}).get("holderIdentity") != self.holder:
                self._set_leading(False)  # someone else holds it now: stop writing at once
            return
        self._renewed(written)

    def _create(self) -> None:
        body: dict[str, Any] = {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.holder,
                "leaseDurationSeconds": int(self.timing.lease_duration),
                "acquireTime": _now(),
                "renewTime": _now(),
                "leaseTransitions": 0,
            },
        }
        try:
            created = self.client.create(body, "leases")
        except kube.ApiError as error:
            if error.status == 409:
                return
            raise
        self._renewed(created)

    def _renewed(self, lease: kube.Object) -> None:
        spec = lease["spec"]
        self._observed_record = (spec.get("holderIdentity"), spec.get("renewTime"))
        self._observed_at = self._last_renewal = time.monotonic()
        self._set_leading(True)

    def _release(self) -> None:
        """Hand the Lease over at once instead of making the next holder wait for it to expire."""

        def give_up(lease: kube.Object) -> kube.JsonPatch | None:
            if (lease.get("spec") or {}).get("holderIdentity") != self.holder:
                return None
            return [
                {"op": "test", "path": "/spec/holderIdentity", "value": self.holder},
                {"op": "replace", "path": "/spec/holderIdentity", "value": ""},
                {"op": "replace", "path": "/spec/leaseDurationSeconds", "value": 1},
            ]

        try:
            self.client.modify(self.path, give_up)
        except (kube.ApiError, OSError) as error:
            log.warning("lease not released", extra={"lease": self.name, "error": str(error)})

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        metrics.LEASE_HELD.set(1 if leading else 0)
        if leading:
            self.leading_event.set()
        else:
            self.leading_event.clear()
        log.info("lease acquired" if leading else "lease lost", extra={"lease": self.name, "holder": self.holder})
        if self.on_change is not None:
            self.on_change(leading)
