"""The Lease endpoints of `fakes.LeaseServer`, where every request is a step of the test.

A replica's elector sends its Lease requests from worker threads (`virtual_time.Lockstep`): a request is recorded
as a `Call` in flight and its thread parks. The test then, at steps of its choosing,

- lands it: the API server applies it now, to the Lease as it is now (a PUT carrying an outdated
  resourceVersion is a conflict, a failed JSON-patch `test` a 422), and keeps the answer;
- returns it to its sender: the answer, if it landed and was heard; a timeout, if it landed and the answer was
  lost, or if it never landed; an error without effect (a 500), if it never landed. A request that returned
  never lands afterwards: how late a request can land is bounded by its client giving up on it, as `leases`
  requires.

While the API server answers a sender at once (`at_once`), its requests land and return with their answers as
they are sent. The test returns a request unheard once its client's timeout has passed (`deadline`), unless its
sender is paused. Every write that landed is recorded, with when it was sent and when it landed: the record the
model's invariants judge from, rather than from what the replicas think.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from mnnvl_runtime import kube

from ..mnnvl_runtime import fakes
from .virtual_time import Lockstep


@dataclasses.dataclass(kw_only=True, eq=False)
class Call:
    """A Lease request sent and not returned to its sender yet."""

    sender: str
    method: str
    body: Any
    sent_at: float
    #: When the sender's client gives up on it (its timeout).
    deadline: float
    landed: bool = False
    #: What the sender will hear, once it returns: the answer or the error.
    result: kube.Object | None = None
    error: kube.ApiError | None = None
    returned: threading.Event = dataclasses.field(default_factory=threading.Event)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Write:
    """A write of the Lease that reached the API server, whether it took effect or not."""

    sender: str
    method: str
    sent_at: float
    landed_at: float
    succeeded: bool
    holder_before: str | None
    holder_after: str | None


class SteppedLeaseServer(fakes.LeaseServer):
    def __init__(self, clock: fakes.Clock, lockstep: Lockstep, *, at_once: Callable[[str], bool]) -> None:
        """`at_once(sender)`: whether a request `sender` sends now is answered as it is sent."""
        super().__init__()
        self.clock = clock
        self.lockstep = lockstep
        self.at_once = at_once
        self.in_flight: list[Call] = []
        #: Every write that landed, in the order it did.
        self.writes: list[Write] = []

    def sent(self, sender: str, method: str, body: Any, timeout: float) -> kube.Object:
        """In the sender's worker thread: the request is in flight until the test returns it (or answered at
        once)."""
        now = self.clock.now
        call = Call(sender=sender, method=method, body=copy.deepcopy(body), sent_at=now, deadline=now + timeout)
        self.requests.append((method, timeout))
        if self.at_once(sender):
            self.land(call)
        else:
            self.in_flight.append(call)
            self.lockstep.park(call.returned)
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    def land(self, call: Call) -> None:
        """The request reaches the API server now; what it answers waits for the request to return."""
        assert not call.landed
        call.landed = True
        before = self.holder
        try:
            call.result = copy.deepcopy(self._answer(call.method, call.body))
        except kube.ApiError as refused:
            call.error = refused
        if call.method != "GET":
            self.writes.append(
                Write(
                    sender=call.sender,
                    method=call.method,
                    sent_at=call.sent_at,
                    landed_at=self.clock.now,
                    succeeded=call.error is None,
                    holder_before=before,
                    holder_after=self.holder,
                )
            )

    def returns(self, call: Call, *, heard: bool) -> None:
        """The request returns to its sender, whose worker thread goes on until it parks again or ends."""
        self.in_flight.remove(call)
        if not heard:
            call.result, call.error = None, timed_out(call)
        elif not call.landed:
            call.error = kube.ApiError(status=500, reason="InternalError")
        self.lockstep.hand_over(call.returned.set)


def timed_out(call: Call) -> kube.ApiError:
    return kube.UnreachableError(call.method, "lease", TimeoutError("the client's timeout passed"))


@dataclasses.dataclass
class LeaseClient:
    """One replica's client of the Lease endpoints (`leases.LeaseClient`): its requests name it as their sender."""

    server: SteppedLeaseServer
    sender: str
    field_manager: str = fakes.LeaseServer.field_manager

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: object = None,
        content_type: str = kube.JSON,
        timeout: float = 30.0,
    ) -> kube.Object:
        return self.server.sent(self.sender, method, body, timeout)
