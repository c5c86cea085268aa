"""The golden table: real workload shapes (shapes/*.yaml), the templates mnnvl's admission stamps into them, and
the revisions upstream LWS v0.10.0 computes from those templates, as recorded in recorded/*.yaml.

The compatibility contract (docs/upgrades.md) is that a later mnnvl stamps every shape exactly as recorded:
otherwise the next unrelated edit of a running LeaderWorkerSet rolls all its groups, and a DisaggregatedSet
starts a rollout to a new revision. Recording is deliberate and separate from the tests
(`python -m tests.unit.golden.record`), so no test run ever rewrites what it checks.
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib
from typing import Any

import jsonpatch
import yaml

from mnnvl_api.decisions import opt_in
from mnnvl_ds import rules as ds_rules
from mnnvl_lws import rules as lws_rules
from mnnvl_testbed import revisions

HERE = pathlib.Path(__file__).parent
SHAPES_DIR = HERE / "shapes"
RECORDED_DIR = HERE / "recorded"
CONTRACT = "docs/upgrades.md"
RECORD_COMMAND = "python -m tests.unit.golden.record"
#: mnnvl as installed for these shapes: gate on, ComputeDomains served (what opting in needs).
ENVIRONMENT = opt_in.Environment(gate_enabled=True, api_served=True)
#: Fields the recorded files hold for a LeaderWorkerSet, and for each LeaderWorkerSet of a DisaggregatedSet.
HASH = "templateRevisionHash"
TEMPLATES = "stampedLeaderWorkerTemplate"


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    kind: str  # LeaderWorkerSet | DisaggregatedSet

    @property
    def manifest_path(self) -> pathlib.Path:
        return SHAPES_DIR / f"{self.name}.yaml"

    @property
    def recorded_path(self) -> pathlib.Path:
        return RECORDED_DIR / f"{self.name}.yaml"

    def manifest(self) -> dict[str, Any]:
        found: dict[str, Any] = yaml.safe_load(self.manifest_path.read_text())
        assert found["kind"] == self.kind, self.manifest_path
        return found


LWS, DS = "LeaderWorkerSet", "DisaggregatedSet"
SHAPES = (
    Shape("deepseek-r1", LWS),
    Shape("deepseek-r1-unset", LWS),
    Shape("deepseek-r1-disabled", LWS),
    Shape("generate-name", LWS),
    Shape("cpu-only-leader", LWS),
    Shape("gpu-sidecar", LWS),
    Shape("explicit-containers", LWS),
    Shape("llm-serving", DS),
    Shape("intra-role", DS),
    Shape("mixed-scopes", DS),
)


def stamped_lws(lws: dict[str, Any]) -> dict[str, Any]:
    """The LeaderWorkerSet as mnnvl-lws's mutating webhook leaves it; its validating webhook must admit it."""
    stamped: dict[str, Any] = jsonpatch.apply_patch(lws, lws_rules.template_patch(lws, ENVIRONMENT))
    refused = lws_rules.lws_errors(stamped, None, ENVIRONMENT)
    assert not refused, f"mnnvl-lws refuses {stamped['metadata']}: {refused}"
    return stamped


def stamped_ds(ds: dict[str, Any]) -> dict[str, Any]:
    """The DisaggregatedSet as mnnvl-ds's mutating webhook leaves it; its validating webhook must admit it."""
    stamped: dict[str, Any] = jsonpatch.apply_patch(ds, ds_rules.ds_patch(ds, ENVIRONMENT))
    refused = ds_rules.ds_errors(stamped, None, ENVIRONMENT)
    assert not refused, f"mnnvl-ds refuses {stamped['metadata']}: {refused}"
    return stamped


def _lws_record(stamped: dict[str, Any]) -> dict[str, Any]:
    return {HASH: revisions.template_revision_hash(stamped), TEMPLATES: stamped["spec"]["leaderWorkerTemplate"]}


def children(ds: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each LeaderWorkerSet upstream creates for the (stamped) set, by name, as mnnvl-lws's webhook leaves it."""
    found: dict[str, dict[str, Any]] = {}
    for slice_index in range(int(ds["spec"].get("slices", 1))):
        for role in ds["spec"]["roles"]:
            child = revisions.ds_child(ds, slice_index, role["name"], replicas=role["spec"].get("replicas", 1))
            found[child["metadata"]["name"]] = stamped_lws(child)
    return found


def golden(shape: Shape) -> dict[str, Any]:
    """What is recorded for a shape: the stamped templates and upstream's revisions of them."""
    manifest = copy.deepcopy(shape.manifest())
    if shape.kind == LWS:
        return {"shape": shape.name, "kind": shape.kind, **_lws_record(stamped_lws(manifest))}
    stamped = stamped_ds(manifest)
    return {
        "shape": shape.name,
        "kind": shape.kind,
        "revision": revisions.ds_revision(stamped),
        "stampedRoles": {role["name"]: role["spec"]["leaderWorkerTemplate"] for role in stamped["spec"]["roles"]},
        "leaderWorkerSets": {name: _lws_record(child) for name, child in children(stamped).items()},
    }


HEADER = (
    f"# Golden record of shapes/{{name}}.yaml: the templates mnnvl stamps and the revisions upstream LWS v0.10.0\n"
    f"# computes from them. A change here restarts running workloads on upgrade: see {CONTRACT}.\n"
    f"# Written by `{RECORD_COMMAND}`, never by hand or by a test run.\n"
)


def render(shape: Shape) -> str:
    return HEADER.format(name=shape.name) + yaml.safe_dump(golden(shape), sort_keys=False, width=120)


def recorded(shape: Shape) -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load(shape.recorded_path.read_text())
    return found
