"""Where the testbed's upstream inputs come from: their Go modules through the module proxy, unless the third-party
directory is named, which then overrides the proxy; and how a tree from the proxy, which holds neither nested modules
nor vendored packages, is built in its own module."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

from mnnvl_testbed import building, thirdparty, versions

from . import file_proxy

CRD = versions.ThirdPartyFile(
    path="crds/tool-v1.0.0/crd.yaml",
    sha256="0" * 64,
    in_module=versions.ModuleFile(module="example.com/tool", version="v1.0.0", path="crds/crd.yaml"),
)
ARCHIVE = versions.SourceArchive(
    file=versions.ThirdPartyFile(path="tool-v1.0.0-src.tar.gz", sha256="0" * 64), top_directory=None
)
TOOL = versions.GoTool(
    name="tool", module="example.com/tool", version="v1.0.0", package="example.com/tool/cmd", source_archive=ARCHIVE
)
API = versions.NestedModule(module="example.com/tool/api", directory="api", version="v1.0.0")


def test_a_file_a_module_holds_is_fetched_from_it_unless_the_directory_is_named(tmp_path: pathlib.Path) -> None:
    assert thirdparty.module_source(CRD, None) == CRD.in_module
    assert thirdparty.module_source(CRD, tmp_path) is None
    only_in_the_directory = versions.ThirdPartyFile(path=CRD.path, sha256=CRD.sha256)
    assert thirdparty.module_source(only_in_the_directory, None) is None


def test_a_tool_is_built_from_its_archive_only_where_the_directory_is_named_or_no_proxy_serves_it(
    tmp_path: pathlib.Path,
) -> None:
    assert building.chosen_archive(TOOL, None) is None
    assert building.chosen_archive(TOOL, tmp_path) == ARCHIVE
    archive_only = dataclasses.replace(TOOL, archive_only=True)
    assert building.chosen_archive(archive_only, None) == ARCHIVE
    without_archive = dataclasses.replace(TOOL, source_archive=None)
    assert building.chosen_archive(without_archive, tmp_path) is None


def test_the_served_version_of_a_tag_the_module_path_cannot_carry_is_its_pseudo_version() -> None:
    assert versions.COMPUTE_DOMAIN_CONTROLLER.version == "v25.12.0"
    assert versions.COMPUTE_DOMAIN_CONTROLLER.served_version == "v0.0.0-20260212105649-0882da8720c2"
    assert versions.LWS_MANAGER.served_version == versions.LWS_VERSION


def test_directory_replaces_of_a_tree_from_the_proxy_become_nested_modules_or_are_dropped() -> None:
    go_mod = {
        "Require": [{"Path": "example.com/tool/api", "Version": "v0.0.0"}, {"Path": "example.com/dep"}],
        "Replace": [
            {"Old": {"Path": "example.com/tool/api"}, "New": {"Path": "./api"}},
            {"Old": {"Path": "example.com/tool/client"}, "New": {"Path": "../client"}},
            {"Old": {"Path": "example.com/dep"}, "New": {"Path": "example.com/dep", "Version": "v1.2.0"}},
        ],
    }
    assert building.proxy_tree_edits(go_mod, (API,)) == [
        "-replace=example.com/tool/api=example.com/tool/api@v1.0.0",
        "-dropreplace=example.com/tool/client",
    ]
    with pytest.raises(building.BuildError) as unpinned:
        building.proxy_tree_edits(go_mod, ())
    assert str(unpinned.value) == (
        "go.mod replaces example.com/tool/api with ./api, a directory a module zip leaves out: pin it as nested"
    )


def test_module_paths_are_escaped_as_proxies_spell_them() -> None:
    assert file_proxy.escaped("github.com/kai-scheduler/KAI-scheduler") == "github.com/kai-scheduler/!k!a!i-scheduler"


def test_a_module_zip_leaves_out_nested_modules_and_vendored_packages() -> None:
    tree = {
        "go.mod": b"m",
        "cmd/main.go": b"c",
        "api/go.mod": b"a",
        "api/types.go": b"t",
        "vendor/modules.txt": b"v",
        "vendor/example.com/dep/dep.go": b"d",
    }
    assert file_proxy.module_files(tree) == {"go.mod": b"m", "cmd/main.go": b"c", "vendor/modules.txt": b"v"}


@pytest.fixture
def proxy(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    """An empty file proxy and module cache, with no third-party directory; the module cache (read-only files) is
    cleaned with the go command."""
    module_cache = tmp_path / "gomodcache"
    for name, value in file_proxy.environment(tmp_path / "proxy", module_cache).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(thirdparty.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setenv("MNNVL_TESTBED_CACHE", str(tmp_path / "cache"))
    yield tmp_path / "proxy"
    subprocess.run(["go", "clean", "-modcache"], env=thirdparty.go_environment(), check=True)


def test_a_tool_from_the_proxy_builds_in_its_own_module_with_its_nested_module_fetched_on_its_own(
    proxy: pathlib.Path,
) -> None:
    """As the DRA driver, Volcano and Grove are built without the directory: the zip keeps `vendor/modules.txt` but
    no vendored package (so `-mod=vendor` would fail), and the go.mod's directory replace of its API module points
    nowhere in the zip."""
    go_mod = (
        b"module example.com/tool\n\ngo 1.26\n\nrequire example.com/tool/api v0.0.0\n\n"
        b"replace example.com/tool/api => ./api\n"
    )
    tree = {
        "go.mod": go_mod,
        "cmd/main.go": b'package main\n\nimport (\n\t"fmt"\n\n\t"example.com/tool/api"\n)\n\n'
        b"func main() { fmt.Println(api.Name) }\n",
        "vendor/modules.txt": b"# example.com/tool/api v0.0.0 => ./api\n## explicit\nexample.com/tool/api\n",
        "vendor/example.com/tool/api/api.go": b'package api\n\nconst Name = "vendored"\n',
        "api/go.mod": b"module example.com/tool/api\n\ngo 1.26\n",
        "api/api.go": b'package api\n\nconst Name = "api"\n',
    }
    file_proxy.publish(proxy, "example.com/tool", "v1.0.0", file_proxy.module_files(tree))
    file_proxy.publish(proxy, API.module, API.version, {"go.mod": tree["api/go.mod"], "api.go": tree["api/api.go"]})
    tool = dataclasses.replace(TOOL, own_module=True, nested_modules=(API,))
    built = building.ensure_binaries((tool,))["tool"]
    assert subprocess.run([built], capture_output=True, text=True, check=True).stdout == "api\n"
    assert building.module_tree(tool, API.module).name == "api@v1.0.0"


def test_a_module_the_go_command_downloaded_is_served_again_from_its_files_in_the_module_cache(
    proxy: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the integration tests serve the upstream modules where the third-party directory is not named; the
    upper-case letter exercises the escaped spelling on both sides."""
    module, version = "example.com/KAI", "v1.0.0"
    file_proxy.publish(proxy, module, version, {"go.mod": f"module {module}\n".encode(), "kai.go": b"package kai\n"})
    thirdparty.downloaded_module(module, version)
    copy = tmp_path / "copy"
    file_proxy.republish(copy, pathlib.Path(os.environ["GOMODCACHE"]), module, version)
    # Emptied, the module cache can only be filled again from the copy.
    subprocess.run(["go", "clean", "-modcache"], env=thirdparty.go_environment(), check=True)
    monkeypatch.setenv("GOPROXY", copy.as_uri())
    assert (thirdparty.downloaded_module(module, version) / "kai.go").read_bytes() == b"package kai\n"
