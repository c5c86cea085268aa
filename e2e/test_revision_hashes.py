"""The golden revisions (tests/unit/golden) are what the real upstream LWS v0.10.0 computes: each shape, created
through mnnvl's and upstream's real webhooks, gets from upstream the recorded `template-revision-hash` (and, for a
DisaggregatedSet, the recorded revision in its LeaderWorkerSets' names). This is the check on the Python port
of upstream's hashing (mnnvl_testbed.revisions) that the golden tests rely on."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.golden import shapes

from mnnvl_api import keys
from mnnvl_api.decisions import ownership
from mnnvl_runtime import kube
from mnnvl_testbed import revisions, testing

from . import workloads

#: Neither upstream revision covers replica counts, so every shape is created without groups: no pods, no
#: ComputeDomains, nothing to wait for but upstream's revisions.
NO_GROUPS = 0


def _without_groups(manifest: dict[str, Any]) -> dict[str, Any]:
    if manifest["kind"] == shapes.LWS:
        manifest["spec"]["replicas"] = NO_GROUPS
    else:
        for role in manifest["spec"]["roles"]:
            role["spec"]["replicas"] = NO_GROUPS
    return manifest


def _create(api: kube.Kube, ns: str, shape: shapes.Shape) -> str:
    """Creates the shape; the name the API server gave it."""
    api_version, plural = (
        (workloads.LWS_API, keys.LWS_PLURAL) if shape.kind == shapes.LWS else (workloads.DS_API, keys.DS_PLURAL)
    )
    created = api.request(
        "POST", kube.path_of(api_version, plural, namespace=ns), body=_without_groups(shape.manifest())
    )
    name: str = created["metadata"]["name"]
    return name


def _upstream_revisions(api: kube.Kube, ns: str) -> dict[str, tuple[dict[str, Any], str | None]]:
    """Upstream's ControllerRevision of each LeaderWorkerSet of the namespace, with the hash on its leader
    StatefulSet (None until there is one), by the LeaderWorkerSet's name. The leader StatefulSet's own
    ControllerRevisions carry the same labels (from its pod template): only the LeaderWorkerSet's count."""
    leaders = {
        sts["metadata"]["name"]: (sts["metadata"].get("labels") or {}).get(keys.LWS_TEMPLATE_REVISION_HASH_LABEL)
        for sts in api.list_objects("apps/v1", "statefulsets", namespace=ns)
    }
    found: dict[str, tuple[dict[str, Any], str | None]] = {}
    for revision in api.list_objects("apps/v1", "controllerrevisions", namespace=ns):
        owner = ownership.controller_reference(revision["metadata"], "LeaderWorkerSet")
        if owner is not None:
            found[owner["name"]] = (revision, leaders.get(owner["name"]))
    return found


def _compare(
    api: kube.Kube, ns: str, lws_name: str, upstream: tuple[dict[str, Any], str | None], expected_hash: str
) -> list[str]:
    """What differs between upstream's revision of a LeaderWorkerSet and the golden one, with upstream's hashed
    data next to the port's when the hashes differ."""
    revision, on_leader = upstream
    found = revision["metadata"]["labels"][keys.LWS_TEMPLATE_REVISION_HASH_LABEL]
    if found == expected_hash == on_leader:
        return []
    stored = api.get(workloads.LWS_API, keys.LWS_PLURAL, lws_name, namespace=ns) or {}
    port = json.loads(revisions.revision_patch(stored)) if stored else None
    return [
        f"{lws_name}: upstream's hash {found} (leader StatefulSet {on_leader}), recorded {expected_hash}\n"
        f"  upstream hashed: {json.dumps(revision.get('data'), sort_keys=True)}\n"
        f"  the port hashes: {json.dumps(port, sort_keys=True)}"
    ]


def test_upstream_computes_the_recorded_revisions(api: kube.Kube, ns: str) -> None:
    names = {shape.name: _create(api, ns, shape) for shape in shapes.SHAPES}
    recorded = {shape.name: shapes.recorded(shape) for shape in shapes.SHAPES}
    lws_names = [names[shape.name] for shape in shapes.SHAPES if shape.kind == shapes.LWS]
    children = {
        child: expected
        for shape in shapes.SHAPES
        if shape.kind == shapes.DS
        for child, expected in recorded[shape.name]["leaderWorkerSets"].items()
    }

    def every_revision() -> dict[str, tuple[dict[str, Any], str | None]] | None:
        found = _upstream_revisions(api, ns)
        # A set's LeaderWorkerSets that upstream named differently never get here: the wait times out showing them.
        expected = set(lws_names) | set(children)
        return found if all(name in found and found[name][1] for name in expected) else None

    upstream = testing.wait_for(
        every_revision,
        what="upstream's ControllerRevision of every LeaderWorkerSet, the DisaggregatedSets' ones included",
        state=testing.state_of(
            lambda: {
                "revisions": {name: leader for name, (_, leader) in _upstream_revisions(api, ns).items()},
                "leaderworkersets": [
                    lws["metadata"]["name"]
                    for lws in api.list_objects(workloads.LWS_API, keys.LWS_PLURAL, namespace=ns)
                ],
                "expected": sorted(set(lws_names) | set(children)),
            }
        ),
        timeout=workloads.TIMEOUT,
    )
    problems: list[str] = []
    for shape in shapes.SHAPES:
        if shape.kind == shapes.LWS:
            name = names[shape.name]
            problems += _compare(api, ns, name, upstream[name], recorded[shape.name][shapes.HASH])
    for child, expected in children.items():
        problems += _compare(api, ns, child, upstream[child], expected[shapes.HASH])
    made = {
        lws["metadata"]["name"]
        for lws in api.list_objects(workloads.LWS_API, keys.LWS_PLURAL, namespace=ns)
        if keys.DS_NAME_LABEL in (lws["metadata"].get("labels") or {})
    }
    # The names carry each set's revision: the recorded names are exactly the ones upstream made.
    assert made == set(children), (made, set(children))
    assert not problems, "\n".join(problems)
