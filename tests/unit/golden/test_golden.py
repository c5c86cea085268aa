"""mnnvl stamps every golden shape exactly as recorded, so upstream's revisions of them stay what they were: an
upgrade of mnnvl restarts nothing (docs/upgrades.md)."""

from __future__ import annotations

import copy
import difflib
from typing import Any

import pytest
import yaml

from mnnvl_api.decisions import opt_in
from mnnvl_ds import rules as ds_rules
from mnnvl_lws import rules as lws_rules
from mnnvl_testbed import revisions

from . import shapes

SHAPE_IDS = [shape.name for shape in shapes.SHAPES]


def _text(document: dict[str, Any]) -> list[str]:
    return yaml.safe_dump(document, sort_keys=False, width=120).splitlines(keepends=True)


def test_every_shape_is_in_the_table_and_recorded() -> None:
    on_disk = {path.stem for path in shapes.SHAPES_DIR.glob("*.yaml")}
    recorded = {path.stem for path in shapes.RECORDED_DIR.glob("*.yaml")}
    assert on_disk == set(SHAPE_IDS), "list each file of shapes/ in shapes.SHAPES"
    assert recorded == set(SHAPE_IDS), f"record the missing shapes, remove stray records: `{shapes.RECORD_COMMAND}`"


@pytest.mark.parametrize("shape", shapes.SHAPES, ids=SHAPE_IDS)
def test_stamps_and_revisions_are_as_recorded(shape: shapes.Shape) -> None:
    expected = shapes.recorded(shape)
    actual = shapes.golden(shape)
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                _text(expected), _text(actual), f"recorded/{shape.name}.yaml", f"computed now ({shape.name})"
            )
        )
        pytest.fail(
            f"mnnvl now stamps shape {shape.name!r} differently, or upstream's revision of it differs: every running "
            f"workload of this shape would be rolled (LWS) or get a new revision (DisaggregatedSet) after an "
            f"upgrade. This breaks the compatibility contract in {shapes.CONTRACT}. If the change is deliberate, "
            f"document it there and re-record with `{shapes.RECORD_COMMAND} {shape.name}`.\n{diff}",
            pytrace=False,
        )


def test_unset_and_disabled_stamp_nothing_and_give_the_same_revision() -> None:
    """The seed: "Unset and disabled produce the same revision, so upgrading LWS does not restart existing
    workloads"."""
    unset = shapes.recorded(shapes.Shape("deepseek-r1-unset", shapes.LWS))
    disabled = shapes.recorded(shapes.Shape("deepseek-r1-disabled", shapes.LWS))
    opted_in = shapes.recorded(shapes.Shape("deepseek-r1", shapes.LWS))
    written = shapes.Shape("deepseek-r1-unset", shapes.LWS).manifest()["spec"]["leaderWorkerTemplate"]
    assert unset[shapes.TEMPLATES] == written
    assert unset[shapes.HASH] == disabled[shapes.HASH] != opted_in[shapes.HASH]


def _stamped_objects(shape: shapes.Shape) -> list[dict[str, Any]]:
    """The objects mnnvl's workload webhooks stamp for a shape, as stored (a generateName resolved to a name)."""
    manifest = shape.manifest()
    if shape.kind == shapes.DS:
        stamped_ds = shapes.stamped_ds(manifest)
        return [stamped_ds, *shapes.children(stamped_ds).values()]
    stamped = copy.deepcopy(shapes.stamped_lws(manifest))
    if "generateName" in stamped["metadata"]:
        stamped["metadata"]["name"] = stamped["metadata"]["generateName"] + "x7k2p"
    return [stamped]


@pytest.mark.parametrize("shape", shapes.SHAPES, ids=SHAPE_IDS)
def test_a_later_edit_changes_no_stamp(shape: shapes.Shape) -> None:
    """An UPDATE of a stamped object (any unrelated edit) gets no patch: its revision stays put."""
    for found in _stamped_objects(shape):
        if found["kind"] == shapes.DS:
            assert ds_rules.ds_patch(found, shapes.ENVIRONMENT) == []
        else:
            assert lws_rules.template_patch(found, shapes.ENVIRONMENT) == [], found["metadata"]
            if shape.kind == shapes.LWS:
                assert revisions.template_revision_hash(found) == shapes.recorded(shape)[shapes.HASH]


@pytest.mark.parametrize("shape", shapes.SHAPES, ids=SHAPE_IDS)
def test_turning_the_gate_off_changes_no_template(shape: shapes.Shape) -> None:
    off = opt_in.Environment(gate_enabled=False, api_served=False)
    for found in _stamped_objects(shape):
        rule = ds_rules.ds_patch if found["kind"] == shapes.DS else lws_rules.template_patch
        assert rule(found, off) == []
