"""The fenced deletion's decisions (`mnnvl_api.decisions.fencing`) over any history of one domain's name, as one
process of the controller sees it: marks set and lifted by any replica, the domain deleted and made again under
its name (even restored with an old mark), this process's Lease lost and won again, time passing, and the
process's own checks (a fresh read of the domain and of the pods using it).

The promise it keeps: a domain is deleted only once every pod admitted before its current mark was set has
landed, that is, once the fence has passed since that mark was set (every admission ends within the fence), and
only when no pod uses it. The process cannot know when another replica set a mark; it may only time the fence from
its own first sight of that very mark, which is never earlier. Every mark, this process's and another replica's,
takes its value from the writer's own source (`domains.new_mark`), so marks set one after another are told apart.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from mnnvl_api import keys
from mnnvl_api.decisions import fencing
from mnnvl_runtime import domain_writer

from . import settings as safety_settings

FENCE = 30.0
#: What happens next: another replica marks the domain or lifts the mark; the domain is deleted and made again
#: (unmarked, or restored from a copy that carries its old mark); this process loses the Lease and wins it again;
#: time passes (seconds); this process checks, with users of the domain (how many) or none.
EVENTS = st.one_of(
    st.tuples(
        st.sampled_from(("marked", "lifted", "made again", "restored with its mark", "lease changes")), st.just(0)
    ),
    st.tuples(st.just("time passes"), st.sampled_from((1.0, 10.0, FENCE - 1.0, FENCE + 5.0))),
    st.tuples(st.just("checks"), st.integers(0, 1)),
)


@dataclasses.dataclass
class Name:
    """The domain under one name, as the API server holds it, and when its current mark was set."""

    uid: int = 1
    mark: str | None = None
    marked_at: float = 0.0


@safety_settings.for_property(max_examples=1000)
@given(history=st.lists(EVENTS, max_size=40))
def test_a_domain_is_deleted_only_once_the_fence_has_passed_since_its_mark(
    history: list[tuple[str, float]],
) -> None:
    domain = Name()
    now = 0.0
    term = 1
    #: The writer's memory of this name: the sighting its fence is timed from (kept however stale).
    seen: fencing.Sighting | None = None
    for what, amount in history:
        if what == "marked":
            domain.mark, domain.marked_at = domain_writer.new_mark(keys.LWS_CONTROLLER), now
        elif what == "lifted":
            domain.mark = None
        elif what == "made again":
            domain = Name(uid=domain.uid + 1)
        elif what == "restored with its mark":
            domain = Name(uid=domain.uid + 1, mark=domain.mark, marked_at=now)
        elif what == "lease changes":
            term += 1
        elif what == "time passes":
            now += amount
        else:
            users = int(amount)
            if domain.mark is None:
                step = fencing.next_step(
                    condemned=False, users=users, condemned_seen_at=None, now=now, fence_seconds=FENCE
                ).step
                if step is fencing.Step.CONDEMN:  # it marks the domain; its fence starts once the mark is persisted
                    domain.mark, domain.marked_at = domain_writer.new_mark(keys.LWS_CONTROLLER), now
                    seen = fencing.sighting(seen, domain_uid=str(domain.uid), mark=domain.mark, term=term, now=now)
                continue
            seen = fencing.sighting(seen, domain_uid=str(domain.uid), mark=domain.mark, term=term, now=now)
            step = fencing.next_step(
                condemned=True, users=users, condemned_seen_at=seen.at, now=now, fence_seconds=FENCE
            ).step
            if step is fencing.Step.DELETE:
                assert users == 0, "deleted while a pod uses it"
                assert now - domain.marked_at >= FENCE, (
                    f"deleted {now - domain.marked_at:.0f} s after its mark was set, before the fence passed"
                )
                domain = Name(uid=domain.uid + 1, mark=None)  # gone; a new one may come under the name
            elif step is fencing.Step.UNCONDEMN:
                assert users > 0
                domain.mark = None


@given(
    users=st.integers(0, 3),
    condemned=st.booleans(),
    seen_at=st.one_of(st.none(), st.floats(0, 200)),
    now=st.floats(0, 200),
)
def test_no_deletion_without_a_sighting_of_the_mark_the_fence_long(
    users: int, condemned: bool, seen_at: float | None, now: float
) -> None:
    """Called with no sighting (whoever calls it lost it), the fence starts now: never a deletion at once."""
    decision = fencing.next_step(
        condemned=condemned, users=users, condemned_seen_at=seen_at, now=now, fence_seconds=FENCE
    )
    if decision.step is fencing.Step.DELETE:
        assert condemned
        assert users == 0
        assert seen_at is not None, "deleted on a mark it never saw"
        assert now - seen_at >= FENCE


SIGHTINGS = st.builds(
    fencing.Sighting,
    domain_uid=st.sampled_from(("1", "2")),
    mark=st.sampled_from(("m1", "m2")),
    term=st.integers(1, 3),
    at=st.floats(0, 100),
)


@given(previous=st.one_of(st.none(), SIGHTINGS), seen=SIGHTINGS)
def test_a_fence_is_timed_from_this_term_s_first_sight_of_this_very_mark(
    previous: fencing.Sighting | None, seen: fencing.Sighting
) -> None:
    """As issue 19 asks of the fence: a replica that leads again trusts no sighting from an earlier term, even of a
    mark that looks the same, and a mark on another domain incarnation, or another mark, starts a fence anew."""
    found = fencing.sighting(previous, domain_uid=seen.domain_uid, mark=seen.mark, term=seen.term, now=seen.at)
    same = previous is not None and (previous.domain_uid, previous.mark, previous.term) == (
        seen.domain_uid,
        seen.mark,
        seen.term,
    )
    assert found == (previous if same else seen)
