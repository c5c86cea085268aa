"""Fixtures of the chart tests: the chart's tools (built like the testbed's), offline schemas for kubeconform, and
rendering with its values files."""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import kubernetes_validate
import pytest
import yaml

from mnnvl_testbed import building, chart, thirdparty, versions

CI_VALUES = chart.CHART_DIR / "ci"
#: Every values file the chart ships for testing, by name (`all-on` for ci/all-on-values.yaml); `defaults` renders
#: with no file at all.
VALUES_FILES = {path.name.removesuffix("-values.yaml"): path for path in sorted(CI_VALUES.glob("*-values.yaml"))}
MATRIX = ["defaults", *VALUES_FILES]

Render = Callable[..., list[dict[str, Any]]]


def values_for(case: str) -> tuple[pathlib.Path, ...]:
    return () if case == "defaults" else (VALUES_FILES[case],)


@pytest.fixture(scope="session")
def tools() -> dict[str, pathlib.Path]:
    return building.ensure_binaries(versions.CHART_TOOLS)


@pytest.fixture(scope="session")
def render(tools: dict[str, pathlib.Path]) -> Render:
    """`chart.render` once the tools exist; keyword arguments as `chart.render` takes them."""
    del tools
    return chart.render


@pytest.fixture(scope="session")
def rendered(render: Render) -> dict[str, list[dict[str, Any]]]:
    """Every matrix case rendered once."""
    return {case: render(values=values_for(case)) for case in MATRIX}


def _built_in_schemas(target: pathlib.Path) -> pathlib.Path:
    """kubernetes-validate's strict schemas, with its `/api/_definitions.json` references (resolved by its own
    loader) pointed at the copied file, which kubeconform can follow."""
    source = (
        pathlib.Path(kubernetes_validate.__file__).parent
        / "kubernetes-json-schema"
        / f"v{versions.CHART_SCHEMAS_KUBERNETES}-local-strict"
    )
    if not source.is_dir():
        raise RuntimeError(f"kubernetes-validate {kubernetes_validate.__version__} has no schemas at {source}")
    target.mkdir(parents=True)
    definitions = (target / "_definitions.json").as_uri()
    for path in source.glob("*.json"):
        (target / path.name).write_text(path.read_text().replace('"/api/_definitions.json#', f'"{definitions}#'))
    return target


def _closed(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists the fields (the API server prunes or, with strict
    field validation, refuses them), as kubeconform's own CRD converter does in strict mode."""
    if isinstance(schema, dict):
        closed = {key: _closed(value) for key, value in schema.items()}
        if (
            "properties" in closed
            and "additionalProperties" not in closed
            and not closed.get("x-kubernetes-preserve-unknown-fields")
        ):
            closed["additionalProperties"] = False
        return closed
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    return schema


class _CrdLoader(yaml.SafeLoader):
    """YAML 1.1 reads a plain `=` as its "value" tag, which some CRDs use as an enum member (a PromQL match
    operator): read it as the string it is."""


def _plain_string(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


_CrdLoader.add_constructor("tag:yaml.org,2002:value", _plain_string)


def _crd_files() -> Iterator[pathlib.Path]:
    # The upstream CRDs the testbed pins, from their Go modules (or the third-party directory where one is named).
    pinned = {crd.file for crd in versions.COMPUTE_DOMAIN_CRDS.values()} | {
        file for crds in versions.TOPOLOGY_CRDS.values() for file in (crds.kai_topology, crds.grove_binding)
    }
    yield from (thirdparty.verified_path(file) for file in sorted(pinned, key=lambda file: file.path))
    for crds in versions.CHART_CRD_MODULES:
        yield from sorted((building.module_dir(crds.module, crds.version) / crds.directory).glob("*.yaml"))


def _crd_schemas(target: pathlib.Path) -> pathlib.Path:
    """Each CRD version's openAPIV3Schema as `<group>/<kind>_<version>.json`, kubeconform's layout for CRDs."""
    for path in _crd_files():
        for crd in yaml.load_all(path.read_text(), Loader=_CrdLoader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = _closed(version["schema"]["openAPIV3Schema"])
                directory = target / spec["group"]
                directory.mkdir(parents=True, exist_ok=True)
                name = f"{spec['names']['kind'].lower()}_{version['name']}.json"
                (directory / name).write_text(json.dumps(schema))
    return target


@pytest.fixture(scope="session")
def schema_locations(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("schemas")
    built_in = _built_in_schemas(root / "kubernetes")
    crds = _crd_schemas(root / "crds")
    return [
        f"{built_in}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
        f"{crds}/{{{{ .Group }}}}/{{{{ .ResourceKind }}}}_{{{{ .ResourceAPIVersion }}}}.json",
    ]


@pytest.fixture(scope="session")
def schema_problems(
    tools: dict[str, pathlib.Path],
    schema_locations: list[str],
    rendered: dict[str, list[dict[str, Any]]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, list[str]]:
    """Every matrix case validated strictly against the offline schemas, by case: `<kind> <name>: <why>` for each
    object refused, a kind without a schema included. One kubeconform run for all cases, since compiling the
    schemas is most of its work."""
    directory = tmp_path_factory.mktemp("rendered")
    for case, objects in rendered.items():
        (directory / f"{case}.yaml").write_text(yaml.safe_dump_all(objects))
    command = [str(tools["kubeconform"]), "-strict", "-summary", "-output", "json"]
    for location in schema_locations:
        command += ["-schema-location", location]
    result = subprocess.run([*command, str(directory)], capture_output=True, text=True, check=False)
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"kubeconform failed: {result.stdout}{result.stderr}") from None
    problems: dict[str, list[str]] = {case: [] for case in rendered}
    for resource in report["resources"] or []:
        case = pathlib.Path(resource["filename"]).name.removesuffix(".yaml")
        problems[case].append(f"{resource['kind']} {resource['name']}: {resource['status']} {resource['msg']}")
    checked = report["summary"]["valid"] + report["summary"]["invalid"] + report["summary"]["errors"]
    if checked != sum(map(len, rendered.values())):
        raise RuntimeError(f"kubeconform checked {checked} objects of {sum(map(len, rendered.values()))}")
    return problems


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The objects of `kind`, by name."""
    return {item["metadata"]["name"]: item for item in objects if item["kind"] == kind}


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert name in found, f"no {kind} {name}; have {sorted(found)}"
    return found[name]


def configuration_of(objects: list[dict[str, Any]], component: str) -> Mapping[str, Any]:
    text = one(objects, "ConfigMap", f"{component}-configuration")["data"]["configuration.yaml"]
    loaded: Mapping[str, Any] = yaml.safe_load(text)
    return loaded
