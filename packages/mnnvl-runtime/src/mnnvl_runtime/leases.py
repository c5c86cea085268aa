"""Lease leader election (`coordination.k8s.io/v1`): every replica serves webhooks and keeps its indexes
warm; only the holder of the controller's Lease writes.

Expiry is judged by when this replica last saw the Lease change (as client-go does), not by comparing
clocks across machines. A holder that cannot renew within `renew_deadline` steps down before its Lease can
expire: a contender takes the Lease only after seeing it unchanged for `lease_duration`, counted from no
earlier than our last renewal, so `lease_duration - renew_deadline` separates our last write from theirs.

What is guaranteed:
- An acquire or renew attempt never outlives the renew deadline. Its requests go out once (no retries)
  with an HTTP timeout of `Timing.request_timeout`, and the attempt as a whole is cut off when the deadline
  is reached.
- The leading flag, `leading_event` and the `on_change` listeners change on the event loop only; the
  blocking Lease calls run in a worker thread and hand back what they found.
- Stepping down (renew deadline passed, Lease taken by another replica, cancelled) clears the leading
  flag first, so no new work starts; then cancels the write tasks handed to `track_writer` and waits for
  them to end; only then releases the Lease, so the next holder can start at once.
- `may_write()` is true only while this replica leads and its last successful renewal is less than
  `renew_deadline` old; work queues check it before each item.
- `term()` changes each time this replica starts leading, so state kept while leading (when a fence started)
  can tell that it is from an earlier term, between which another replica may have led.

- Writes of tracked tasks run under `permit` (`kube.WRITE_PERMIT`): a mutating request is sent only while
  `may_write()` holds, checked in the worker thread before each send (retries and read-modify-write steps
  included), so a cancelled task whose thread still runs sends nothing more. Stepping down releases the
  Lease only once no such request is on its way; otherwise it leaves the Lease to expire.

What is not: a request sent just before the replica stops renewing can still reach the API server after the
renew deadline; the margin above covers it only when its HTTP timeout is shorter than
`lease_duration - renew_deadline`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from . import kube, metrics

log = logging.getLogger(__name__)
LEASE_API = "coordination.k8s.io/v1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timing:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @property
    def request_timeout(self) -> float:
        """The HTTP timeout of one Lease call: a hung call must leave time to retry before the deadline."""
        return min(self.retry_period, self.renew_deadline / 2)


class LeaseClient(Protocol):
    """What the elector needs of a client: single requests, so it controls every timeout itself."""

    field_manager: str

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = ...,
        body: object = ...,
        content_type: str = ...,
        timeout: float = ...,
    ) -> kube.Object: ...


def single_attempt_client(client: kube.Kube) -> kube.Kube:
    """`client`'s connection and field manager without retries: retrying a Lease call could outlive the
    renew deadline, while the elector's own next attempt comes within `retry_period` anyway."""
    return kube.Kube(client.api, field_manager=client.field_manager, attempts=1)


@dataclasses.dataclass(frozen=True)
class Observation:
    """The Lease record (holder, renewTime) as last seen, and the local monotonic time it was first seen."""

    record: tuple[str | None, str | None] = (None, None)
    at: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Attempt:
    """What one acquire or renew attempt found out; the event loop applies it to the elector."""

    observation: Observation
    #: When the Lease was written with this replica as its holder; None when it was not.
    renewed_at: float | None = None
    #: Another replica holds the Lease and it has not expired.
    held_by_other: bool = False


def observe(spec: kube.Object, previous: Observation, now: float) -> Observation:
    """A changed record restarts the expiry clock; an unchanged one keeps the time it was first seen."""
    record = (spec.get("holderIdentity"), spec.get("renewTime"))
    return previous if record == previous.record else Observation(record, now)


def claim(
    spec: kube.Object, *, holder: str, observation: Observation, timing: Timing, now: float, wall_time: str
) -> kube.Object | None:
    """The Lease spec to write so that `holder` holds it, or None while another holder's Lease is unexpired."""
    current = spec.get("holderIdentity")
    duration = float(spec.get("leaseDurationSeconds") or timing.lease_duration)
    expired = not current or now - observation.at > duration
    if current != holder and not expired:
        return None
    ours = current == holder
    return {
        **spec,
        "holderIdentity": holder,
        "leaseDurationSeconds": int(timing.lease_duration),
        "acquireTime": spec.get("acquireTime") if ours else wall_time,
        "renewTime": wall_time,
        "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if ours else 1),
    }


def _wall_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: LeaseClient,
        *,
        namespace: str,
        name: str,
        holder: str,
        timing: Timing = Timing(),
        on_change: Iterable[Callable[[bool], None]] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`client` should not retry on its own (see `single_attempt_client`): the elector bounds each call."""
        self.client = client
        self.namespace = namespace
        self.name = name
        self.holder = holder
        self.timing = timing
        #: Called on the event loop with the new state each time this replica starts or stops leading.
        self.on_change: list[Callable[[bool], None]] = list(on_change)
        self.leading_event = asyncio.Event()
        self._clock = clock
        self._leading = False
        self._terms = 0
        self._without_lease = False
        self._observation = Observation()
        self._last_renewal = 0.0
        self._writers: set[asyncio.Task[Any]] = set()
        #: What the writes of the tracked tasks run under (`kube.WRITE_PERMIT`): withdrawn with `may_write()`.
        self.permit = kube.WritePermit(self.may_write)
        # Replaced after every attempt and step-down, so `wait_writable` wakes up to look again.
        self._progress = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def path(self) -> str:
        return kube.path_of(LEASE_API, "leases", namespace=self.namespace, name=self.name)

    def term(self) -> int:
        """Which of this replica's terms as leader is the latest: counts up each time it starts leading."""
        return self._terms

    def may_write(self) -> bool:
        """Leading, and renewed recently enough that no other replica can have taken the Lease."""
        if not self._leading:
            return False
        return self._without_lease or self._clock() - self._last_renewal < self.timing.renew_deadline

    async def wait_writable(self) -> None:
        """Return once `may_write()` holds."""
        while not self.may_write():
            await self._progress.wait()

    def track_writer(self, task: asyncio.Task[Any]) -> None:
        """Cancel `task` when this replica steps down, and release the Lease only after it has ended."""
        self._writers.add(task)
        task.add_done_callback(self._writers.discard)

    def lead_without_lease(self) -> None:
        """For a single replica run with leader election off: lead for good, without a Lease."""
        self._without_lease = True
        self._set_leading(True)

    async def run(self) -> None:
        """Try to acquire, then keep renewing, until cancelled; steps down and releases the Lease on the way out."""
        try:
            while True:
                await self._attempt_within_deadline()
                if self._leading and not self.may_write():
                    log.error("lease renewal deadline passed, stepping down", extra={"lease": self.name})
                    await self._step_down()
                self._pulse()
                await asyncio.sleep(self.timing.retry_period)
        finally:
            await self._step_down()

    async def _attempt_within_deadline(self) -> None:
        deadline = self.timing.renew_deadline
        left = deadline - (self._clock() - self._last_renewal) if self._leading else deadline
        if left <= 0:
            return
        try:
            attempt = await asyncio.wait_for(asyncio.to_thread(self._attempt, self._observation), left)
        except TimeoutError:
            log.warning("lease attempt timed out", extra={"lease": self.name, "seconds": left})
            return
        except Exception as error:  # the elector must outlive any one failed call
            log.warning("lease attempt failed", extra={"lease": self.name, "error": str(error)})
            return
        self._observation = attempt.observation
        if attempt.renewed_at is not None:
            self._last_renewal = attempt.renewed_at
            self._set_leading(True)
        elif attempt.held_by_other and self._leading:
            log.error("lease taken by another replica, stepping down", extra={"lease": self.name})
            await self._step_down()

    async def _step_down(self) -> None:
        if not self._leading:
            return
        self._set_leading(False)  # first: may_write() is False from here on, so no new write starts
        writers = list(self._writers)
        for task in writers:
            task.cancel()
        if writers:
            await asyncio.wait(writers, timeout=self.timing.request_timeout)
        # A cancelled task's request may still be on its way in a worker thread (none starts any more: the permit
        # went with the leading flag). Releasing now would let the next holder write beside it.
        if not await asyncio.to_thread(self.permit.wait_idle, self.timing.renew_deadline):
            log.warning("writes still on their way, leaving the lease to expire", extra={"lease": self.name})
            return
        try:
            await asyncio.to_thread(self._release)
        except Exception as error:  # the next holder then waits for the Lease to expire
            log.warning("lease not released", extra={"lease": self.name, "error": str(error)})

    # --- in a worker thread: blocking calls, no state of the elector changed ---------------------------

    def _attempt(self, observation: Observation) -> Attempt:
        timeout = self.timing.request_timeout
        try:
            lease = self.client.request("GET", self.path, timeout=timeout)
        except kube.ApiError as error:
            if error.status != 404:
                raise
            return self._create(observation)
        now = self._clock()
        observation = observe(lease.get("spec") or {}, observation, now)
        spec = claim(
            lease.get("spec") or {},
            holder=self.holder,
            observation=observation,
            timing=self.timing,
            now=now,
            wall_time=_wall_time(),
        )
        if spec is None:
            return Attempt(observation=observation, held_by_other=True)
        # PUT carries the resourceVersion read above: a concurrent writer makes this a 409.
        sent_at = self._clock()
        try:
            written = self.client.request("PUT", self.path, body={**lease, "spec": spec}, timeout=timeout)
        except kube.ApiError as error:
            if error.status != 409:
                raise
            current = self.client.request("GET", self.path, timeout=timeout)
            taken = (current.get("spec") or {}).get("holderIdentity") != self.holder
            return Attempt(observation=observation, held_by_other=taken)
        return self._written(written, sent_at)

    def _create(self, observation: Observation) -> Attempt:
        now = _wall_time()
        body: kube.Object = {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.holder,
                "leaseDurationSeconds": int(self.timing.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        collection = kube.path_of(LEASE_API, "leases", namespace=self.namespace)
        sent_at = self._clock()
        try:
            created = self.client.request("POST", collection, body=body, timeout=self.timing.request_timeout)
        except kube.ApiError as error:
            if error.status == 409:  # another replica created it first; the next attempt reads it
                return Attempt(observation=observation)
            raise
        return self._written(created, sent_at)

    def _written(self, lease: kube.Object, sent_at: float) -> Attempt:
        """Counted from when the write was sent: other replicas may have seen it land any time after that, and
        their expiry clocks start when they do, so a slow answer must not extend this replica's deadline."""
        return Attempt(observation=observe(lease["spec"], Observation(), sent_at), renewed_at=sent_at)

    def _release(self) -> None:
        """Hand the Lease over at once instead of making the next holder wait for it to expire."""
        timeout = self.timing.request_timeout
        lease = self.client.request("GET", self.path, timeout=timeout)
        if (lease.get("spec") or {}).get("holderIdentity") != self.holder:
            return
        give_up = [
            {"op": "test", "path": "/spec/holderIdentity", "value": self.holder},
            {"op": "replace", "path": "/spec/holderIdentity", "value": ""},
            {"op": "replace", "path": "/spec/leaseDurationSeconds", "value": 1},
        ]
        self.client.request(
            "PATCH",
            self.path,
            query={"fieldManager": self.client.field_manager},
            body=give_up,
            content_type=kube.JSON_PATCH,
            timeout=timeout,
        )

    # --- on the event loop ------------------------------------------------------------------------------

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        metrics.LEASE_HELD.set(1 if leading else 0)
        if leading:
            self._terms += 1
            self.leading_event.set()
        else:
            self.leading_event.clear()
        log.info("lease acquired" if leading else "lease lost", extra={"lease": self.name, "holder": self.holder})
        for listener in self.on_change:
            listener(leading)
        self._pulse()

    def _pulse(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()
