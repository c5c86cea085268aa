"""A renamed value keeps working for one release, with a warning in NOTES (docs/upgrades.md, "Chart values: renames
and removals"): one entry in the table `mnnvl.deprecatedValues` of `_helpers.tpl`, templates reading the value
through `mnnvl.value`, the old key kept in the schema. No value has been renamed yet, so a copy of the chart renames
`guardian.replicas` from an invented `guardian.replicaCount` the way the first real rename would, and renders both
spellings. Like test_notes.py, the copy renders NOTES into a ConfigMap, since `helm template` leaves NOTES out."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from mnnvl_testbed import chart

from .conftest import Render, one

OLD = "guardian.replicaCount"
NEW = "guardian.replicas"
REMOVED_IN = "0.3.0"
ENTRY = f'- {{old: {OLD}, new: {NEW}, removedIn: "{REMOVED_IN}"}}'
WARNING = f"WARNING: the value {OLD} is deprecated and goes away in chart {REMOVED_IN}: set {NEW} instead."
#: How every deprecation warning starts (NOTES has warnings of other kinds too, e.g. the gate being off).
ANY_DEPRECATION = "WARNING: the value "
#: selfSigned generates a new certificate on every render, so two renders never match; certManager's objects do.
STABLE = {"certs": {"mode": "certManager"}}
#: The ConfigMaps the copies add to show NOTES and the table; not objects of the chart.
PROBES = {"test-notes", "test-deprecated-values"}
LWS_API = "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"
TABLE_DEFINE = '{{- define "mnnvl.deprecatedValues" }}\n'


def _copy(
    tmp_path_factory: pytest.TempPathFactory,
    entries: tuple[str, ...] = (),
    edit: Callable[[pathlib.Path], None] | None = None,
) -> pathlib.Path:
    """The chart, changed by `edit`, with the table's `entries` added, and ConfigMaps showing NOTES and the table as
    rendered (added last, so they show NOTES as `edit` left it)."""
    copy = tmp_path_factory.mktemp("chart") / "mnnvl"
    shutil.copytree(chart.CHART_DIR, copy)
    if edit:
        edit(copy)
    templates = copy / "templates"
    helpers = (templates / "_helpers.tpl").read_text()
    assert helpers.count(TABLE_DEFINE) == 1, "the table's define line changed; update TABLE_DEFINE"
    (templates / "_helpers.tpl").write_text(
        helpers.replace(TABLE_DEFINE, TABLE_DEFINE + "".join(f"{line}\n" for line in entries))
    )
    notes = (templates / "NOTES.txt").read_text()
    (templates / "_test_notes.tpl").write_text('{{- define "test.notes" -}}\n' + notes + "\n{{- end }}\n")
    (templates / "test_probes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: test-notes\ndata:\n"
        '  notes: |\n    {{- include "test.notes" . | nindent 4 }}\n'
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: test-deprecated-values\ndata:\n"
        '  table: {{ include "mnnvl.deprecatedValues" . | fromYamlArray | toJson | quote }}\n'
    )
    return copy


def _replace_once(path: pathlib.Path, old: str, new: str) -> None:
    text = path.read_text()
    # Exactly one site each: a second one left reading the value directly would make the old key half-work.
    assert text.count(old) == 1, f"{path.name}: {old!r} found {text.count(old)} times"
    path.write_text(text.replace(old, new))


def _rename(copy: pathlib.Path) -> None:
    """What the first rename does besides the table entry: every site reading `<controller>.replicas` reads it through
    the helper, and the schema accepts the old key with its deprecation note (values.yaml keeps only the new key)."""
    through_helper = (
        '(include "mnnvl.value" (dict "root" $ "path" (printf "%s.replicas" $controller)) | fromJson).value'
    )
    for template in ("controller.yaml", "NOTES.txt"):
        _replace_once(copy / "templates" / template, "{{ $values.replicas }}", f"{{{{ {through_helper} }}}}")
    schema_path = copy / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    guardian = schema["properties"]["guardian"]
    assert guardian["additionalProperties"] is False, "the schema should refuse unknown keys"
    guardian["properties"]["replicaCount"] = {
        **guardian["properties"]["replicas"],
        "description": f"Deprecated: use {NEW}; removed in {REMOVED_IN}.",
    }
    schema_path.write_text(json.dumps(schema, indent=2) + "\n")


@pytest.fixture(scope="module")
def renamed_chart(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return _copy(tmp_path_factory, (ENTRY,), _rename)


def _objects(render: Render, chart_dir: pathlib.Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    # With the LeaderWorkerSet API served, NOTES has no warning but the deprecations'.
    return render(chart_dir=chart_dir, overrides={**STABLE, **values}, api_versions=[LWS_API])


def _chart_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in objects if item["metadata"]["name"] not in PROBES]


def _notes(objects: list[dict[str, Any]]) -> str:
    text: str = one(objects, "ConfigMap", "test-notes")["data"]["notes"]
    return text


def _replicas(objects: list[dict[str, Any]], controller: str) -> Any:
    return one(objects, "Deployment", f"mnnvl-{controller}")["spec"]["replicas"]


@pytest.mark.parametrize("count", [3, 0], ids=["three", "zero-counts-as-set"])
def test_the_old_key_renders_like_the_new_one_and_warns(
    render: Render, renamed_chart: pathlib.Path, count: int
) -> None:
    with_new = _objects(render, renamed_chart, {"guardian": {"replicas": count}})
    with_old = _objects(render, renamed_chart, {"guardian": {"replicaCount": count}})
    assert _replicas(with_old, "guardian") == count
    assert _chart_objects(with_old) == _chart_objects(with_new)
    assert f"mnnvl-guardian: enabled, {count} replica(s)" in _notes(with_old)
    assert WARNING in _notes(with_old)
    assert ANY_DEPRECATION not in _notes(with_new)


def test_without_either_key_the_default_applies(render: Render, renamed_chart: pathlib.Path) -> None:
    default = yaml.safe_load((chart.CHART_DIR / "values.yaml").read_text())["guardian"]["replicas"]
    objects = _objects(render, renamed_chart, {})
    assert _replicas(objects, "guardian") == default
    assert ANY_DEPRECATION not in _notes(objects)


def test_the_old_key_wins_over_the_new_one(render: Render, renamed_chart: pathlib.Path) -> None:
    # values.yaml always sets the new key, so the helper cannot tell a user's new key from the default: the old
    # key, which only a user sets, wins, and NOTES says so.
    objects = _objects(render, renamed_chart, {"guardian": {"replicas": 4, "replicaCount": 3}})
    assert _replicas(objects, "guardian") == 3
    assert WARNING in _notes(objects)


def test_the_shipped_schema_refuses_the_old_key(render: Render) -> None:
    # Why the copy adds the old key to the schema: without it, values carried over by --reset-then-reuse-values fail.
    with pytest.raises(chart.RenderError, match="replicaCount"):
        render(overrides={"guardian": {"replicaCount": 3}})


def _at(tree: Any, path: str) -> tuple[bool, Any]:
    """(found, value) at a dotted path of nested dicts."""
    for key in path.split("."):
        if not isinstance(tree, dict) or key not in tree:
            return False, None
        tree = tree[key]
    return True, tree


def _schema_at(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    for key in path.split("."):
        schema = schema.get("properties", {}).get(key)
        if schema is None:
            return None
    return schema


def _version(text: str) -> tuple[int, ...] | None:
    return tuple(map(int, text.split("."))) if re.fullmatch(r"\d+\.\d+\.\d+", text) else None


def table_problems(render: Render, chart_dir: pathlib.Path) -> tuple[list[Any], list[str]]:
    """The table as the chart renders it, and what is wrong with it: each entry names an old key values.yaml does
    not hold (a default would always look set) but the schema accepts with its deprecation note, a new key values.yaml
    holds, and a release after this chart's version."""
    table: list[Any] = json.loads(
        one(render(chart_dir=chart_dir), "ConfigMap", "test-deprecated-values")["data"]["table"]
    )
    values = yaml.safe_load((chart_dir / "values.yaml").read_text())
    schema = json.loads((chart_dir / "values.schema.json").read_text())
    chart_version = _version(yaml.safe_load((chart_dir / "Chart.yaml").read_text())["version"])
    problems: list[str] = []
    for entry in table:
        if not isinstance(entry, dict) or set(entry) not in ({"old", "new", "removedIn"}, {"old", "removedIn"}):
            problems.append(f"{entry!r}: not a map of old, new (unless removed) and removedIn")
            continue
        old, new, removed_in = entry["old"], entry.get("new"), entry["removedIn"]
        if _at(values, old)[0]:
            problems.append(f"{old}: still in values.yaml")
        if new is not None and not _at(values, new)[0]:
            problems.append(f"{new}: not in values.yaml")
        description = (_schema_at(schema, old) or {}).get("description", "")
        note = f"Deprecated: use {new}" if new is not None else "Deprecated: no effect"
        if not description.startswith(f"{note}; removed in {removed_in}"):
            problems.append(f"{old}: the schema has no deprecation note for it")
        version = _version(str(removed_in))
        if not isinstance(removed_in, str) or version is None or chart_version is None or version <= chart_version:
            problems.append(f"{old}: removedIn {removed_in!r} is not a quoted release after {chart_version}")
    olds = [str(entry.get("old")) for entry in table if isinstance(entry, dict)]
    problems += [f"{old}: listed twice" for old in sorted({old for old in olds if olds.count(old) > 1})]
    return table, problems


def test_the_shipped_table_is_well_formed(render: Render, tmp_path_factory: pytest.TempPathFactory) -> None:
    table, problems = table_problems(render, _copy(tmp_path_factory))
    assert isinstance(table, list)
    assert problems == []


def test_the_renamed_copys_table_is_well_formed(render: Render, renamed_chart: pathlib.Path) -> None:
    # The shipped table is empty, so the check proves itself here, on an entry.
    table, problems = table_problems(render, renamed_chart)
    assert table == [{"old": OLD, "new": NEW, "removedIn": REMOVED_IN}]
    assert problems == []


def test_a_malformed_table_is_caught(render: Render, tmp_path_factory: pytest.TempPathFactory) -> None:
    entries = (
        "- {old: guardian.replicas, new: guardian.replicaCount, removedIn: 0.1}",
        "- {old: guardian.replicas, new: guardian.replicas, removedIn: '0.3.0'}",
        "- {old: lws.replicaCount}",
    )
    _, problems = table_problems(render, _copy(tmp_path_factory, entries))
    assert problems == [
        "guardian.replicas: still in values.yaml",
        "guardian.replicaCount: not in values.yaml",
        "guardian.replicas: the schema has no deprecation note for it",
        "guardian.replicas: removedIn 0.1 is not a quoted release after (0, 1, 0)",
        "guardian.replicas: still in values.yaml",
        "guardian.replicas: the schema has no deprecation note for it",
        "{'old': 'lws.replicaCount'}: not a map of old, new (unless removed) and removedIn",
        "guardian.replicas: listed twice",
    ]


REMOVED = "lws.legacySwitch"
REMOVAL = f'- {{old: {REMOVED}, removedIn: "{REMOVED_IN}"}}'


def _remove(copy: pathlib.Path) -> None:
    """What removing a value leaves behind for one release: the schema still accepts it, with its note."""
    schema_path = copy / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    schema["properties"]["lws"]["properties"]["legacySwitch"] = {
        "type": "boolean",
        "description": f"Deprecated: no effect; removed in {REMOVED_IN}.",
    }
    schema_path.write_text(json.dumps(schema, indent=2) + "\n")


def test_a_removed_value_is_still_accepted_changes_nothing_and_warns(
    render: Render, tmp_path_factory: pytest.TempPathFactory
) -> None:
    removed_chart = _copy(tmp_path_factory, (REMOVAL,), _remove)
    table, problems = table_problems(render, removed_chart)
    assert (table, problems) == ([{"old": REMOVED, "removedIn": REMOVED_IN}], [])
    with_it = _objects(render, removed_chart, {"lws": {"legacySwitch": True}})
    without = _objects(render, removed_chart, {})
    assert _chart_objects(with_it) == _chart_objects(without)
    assert f"WARNING: the value {REMOVED} has no effect any more and goes away in chart {REMOVED_IN}" in _notes(with_it)
    assert ANY_DEPRECATION not in _notes(without)
