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
