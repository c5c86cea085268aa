"""The fenced deletion's steps: condemn, wait out the fence, check afresh, delete; lift the mark on a user."""

from __future__ import annotations

import pytest

from mnnvl_api.decisions import fencing

Step = fencing.Step


@pytest.mark.parametrize(
    ("condemned", "users", "seen_at", "now", "expected"),
    [
        pytest.param(False, 1, None, 0.0, fencing.Decision(step=Step.NOTHING), id="in-use"),
        pytest.param(False, 0, None, 0.0, fencing.Decision(step=Step.CONDEMN, wait_seconds=30.0), id="unused"),
        pytest.param(True, 2, 0.0, 40.0, fencing.Decision(step=Step.UNCONDEMN), id="user-appeared"),
        pytest.param(True, 0, 0.0, 12.0, fencing.Decision(step=Step.WAIT, wait_seconds=18.0), id="within-fence"),
        pytest.param(True, 0, None, 99.0, fencing.Decision(step=Step.WAIT, wait_seconds=30.0), id="mark-just-seen"),
        pytest.param(True, 0, 0.0, 30.0, fencing.Decision(step=Step.DELETE), id="fence-passed"),
    ],
)
def test_the_next_step_of_a_fenced_deletion(
    condemned: bool, users: int, seen_at: float | None, now: float, expected: fencing.Decision
) -> None:
    decided = fencing.next_step(
        condemned=condemned, users=users, condemned_seen_at=seen_at, now=now, fence_seconds=30.0
    )
    assert decided == expected


SEEN = fencing.Sighting(domain_uid="uid-d", mark="mnnvl-lws/aaaa", term=3, at=5.0)


@pytest.mark.parametrize(
    ("uid", "mark", "term", "expected_at"),
    [
        pytest.param("uid-d", "mnnvl-lws/aaaa", 3, 5.0, id="same-mark-same-term"),
        pytest.param("uid-d", "mnnvl-lws/bbbb", 3, 40.0, id="mark-set-again"),
        pytest.param("uid-d", "mnnvl-lws/aaaa", 4, 40.0, id="a-new-term"),
        pytest.param("uid-e", "mnnvl-lws/aaaa", 3, 40.0, id="a-same-named-successor"),
    ],
)
def test_the_fence_is_timed_from_the_first_sight_of_this_mark_in_this_term(
    uid: str, mark: str, term: int, expected_at: float
) -> None:
    seen = fencing.sighting(SEEN, domain_uid=uid, mark=mark, term=term, now=40.0)
    assert seen == fencing.Sighting(domain_uid=uid, mark=mark, term=term, at=expected_at)


def test_a_mark_never_seen_before_starts_its_fence_now() -> None:
    seen = fencing.sighting(None, domain_uid="uid-d", mark="mnnvl-lws/aaaa", term=1, now=7.0)
    assert seen.at == 7.0
