"""The fenced deletion of a ComputeDomain, as a pure step function.

NVIDIA's driver tears a domain down as soon as it is marked for deletion, so a pod admitted onto a domain
between the controller's last in-use check and its DELETE would run without IMEX. Pod admission cannot be
locked, but it can be fenced:

1. condemn: mark the domain (with a resourceVersion precondition). From then on the pod webhooks, which
   read the domain afresh, refuse to admit a pod onto it (the pod's creation is retried);
2. wait out the fence: longer than any admission takes, so every pod admitted before the mark is persisted;
3. read the pods afresh: any non-terminal user (claim holder or recorder) lifts the mark again;
4. otherwise delete, preconditioned on the uid and resourceVersion that carried the mark.

The fence is timed from this process's first sight of *this* mark during *this* Lease term (`sighting`), never
from an earlier one: a mark carries its own value (a nonce written with it), so a mark lifted and set again by
another replica is a new mark, and a pod admitted just before the new one was set may still be in flight; and
a replica that leads again knows nothing of what happened while it did not lead.
"""

from __future__ import annotations

import dataclasses
import enum


class Step(enum.Enum):
    NOTHING = "nothing"  # in use and not condemned: leave it
    CONDEMN = "condemn"
    UNCONDEMN = "uncondemn"  # a user appeared: admit pods onto it again
    WAIT = "wait"  # condemned; the fence has not passed yet
    DELETE = "delete"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    step: Step
    wait_seconds: float = 0.0  # for WAIT and CONDEMN: when to come back


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sighting:
    """When this process first saw one condemned mark (the domain's uid and the mark's value), in which term."""

    domain_uid: str
    mark: str
    term: int
    at: float


def sighting(previous: Sighting | None, *, domain_uid: str, mark: str, term: int, now: float) -> Sighting:
    """The sighting the fence of the mark seen `now` is timed from: `previous` only when it is of this very mark
    and was made in this Lease term; otherwise the fence starts now."""
    if previous is not None and previous.domain_uid == domain_uid and previous.mark == mark and previous.term == term:
        return previous
    return Sighting(domain_uid=domain_uid, mark=mark, term=term, at=now)


def next_step(
    *, condemned: bool, users: int, condemned_seen_at: float | None, now: float, fence_seconds: float
) -> Decision:
    """What to do next with a domain that should go, given a fresh read of it and of the pods using it (`now`:
    when that pod list began, so a pod persisted while it ran counts as not yet seen)."""
    if users:
        return Decision(step=Step.UNCONDEMN if condemned else Step.NOTHING)
    if not condemned:
        return Decision(step=Step.CONDEMN, wait_seconds=fence_seconds)
    waited = 0.0 if condemned_seen_at is None else now - condemned_seen_at
    if waited < fence_seconds:
        return Decision(step=Step.WAIT, wait_seconds=fence_seconds - waited)
    return Decision(step=Step.DELETE)
