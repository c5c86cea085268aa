from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import references


def pod(phase: str | None, *templates: str, deleting: bool = False) -> dict[str, Any]:
    claims = [{"name": f"claim-{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    claims.append({"name": "direct", "resourceClaimName": "a-shared-claim"})
    body: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"resourceClaims": claims}, "status": {}}
    if phase is not None:
        body["status"]["phase"] = phase
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return body


def test_a_pod_references_the_templates_its_claims_come_from_not_direct_claims() -> None:
    assert references.referenced_claim_templates(pod("Running", "cd-a-channel", keys.CHANNEL_CLAIM_NAME)) == {
        "cd-a-channel",
        keys.CHANNEL_CLAIM_NAME,
    }


def test_a_pod_without_claims_references_nothing() -> None:
    assert references.referenced_claim_templates({"spec": {"containers": []}}) == frozenset()


@pytest.mark.parametrize(
    ("phase", "deleting", "counts"),
    [
        pytest.param(None, False, True, id="just-created"),
        pytest.param("Pending", False, True, id="pending"),
        pytest.param("Running", False, True, id="running"),
        pytest.param("Running", True, True, id="terminating-still-runs"),
        pytest.param("Unknown", False, True, id="unknown"),
        pytest.param("Succeeded", False, False, id="succeeded"),
        pytest.param("Failed", True, False, id="failed"),
    ],
)
def test_only_succeeded_and_failed_pods_are_terminal(phase: str | None, deleting: bool, counts: bool) -> None:
    body = pod(phase, "cd-a-channel", deleting=deleting)
    assert references.is_non_terminal(body) is counts
    assert references.live_claim_templates(body) == (frozenset({"cd-a-channel"}) if counts else frozenset())


def test_users_of_a_domain_are_the_live_pods_holding_its_claim_or_recording_it() -> None:
    running = {**pod("Running", "cd-a-channel"), "metadata": {"name": "runs"}}
    done = {**pod("Succeeded", "cd-a-channel"), "metadata": {"name": "done"}}
    other = {**pod("Running", "cd-b-channel"), "metadata": {"name": "other"}}
    recorder: dict[str, Any] = {
        "metadata": {"name": "cpu-leader", "annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "cd-a"}},
        "spec": {"containers": []},
        "status": {"phase": "Running"},
    }
    finished_recorder = {
        **recorder,
        "metadata": {**recorder["metadata"], "name": "gone"},
        "status": {"phase": "Failed"},
    }
    found = references.users_of(
        [running, done, other, recorder, finished_recorder], domain="cd-a", claim_template="cd-a-channel"
    )
    assert found == ["runs", "cpu-leader"]
