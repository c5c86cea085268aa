"""Controlling owners, read one way for every controller (`ownership`)."""

from __future__ import annotations

from mnnvl_api.decisions import ownership


def reference(kind: str, name: str, *, controller: bool) -> dict[str, object]:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": f"uid-{name}", "controller": controller}


def test_the_controlling_owner_of_any_kind() -> None:
    meta = {
        "ownerReferences": [
            reference("Job", "other", controller=False),
            reference("StatefulSet", "web", controller=True),
        ]
    }
    assert ownership.controller_owner(meta) == ("apps/v1", "StatefulSet", "web")
    assert ownership.controller_reference(meta, "StatefulSet") == meta["ownerReferences"][1]
    assert ownership.controller_reference(meta, "Job") is None


def test_no_controlling_owner() -> None:
    assert ownership.controller_owner({}) is None
    assert ownership.controller_owner({"ownerReferences": [reference("Job", "j", controller=False)]}) is None
