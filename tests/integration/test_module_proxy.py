"""Without `MNNVL_TESTBED_THIRD_PARTY`, the testbed fetches its upstream CRDs and the sources it builds from their Go
modules at the pinned versions and checks each file against its pin; with it, the directory wins.

The tests serve these modules from a file proxy (`GOPROXY=file://…`) of their own, laid out one of two ways:

- where the variable names the third-party directory (this machine's proxy refuses these modules, 403), from its
  files: each module from its source archive as its zip would hold it, and the modules of which the directory has a
  CRD alone as that CRD with a go.mod;
- where it is unset (a proxy that serves them all, such as proxy.golang.org), from the modules themselves, downloaded
  once through the ambient `GOPROXY` into the ambient module cache and copied from there; the directory the last
  test names is then made of the downloaded CRDs.

Nothing is built, and no test needs a running testbed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import tarfile
from collections.abc import Iterator

import pytest

from mnnvl_testbed import building, grove, thirdparty, versions, volcano
from tests.unit.mnnvl_testbed import file_proxy

CRDS = (
    *(crd.file for crd in versions.COMPUTE_DOMAIN_CRDS.values()),
    *{file for crds in versions.TOPOLOGY_CRDS.values() for file in (crds.kai_topology, crds.grove_binding)},
)
BUILT = (
    versions.LWS_MANAGER,
    versions.COMPUTE_DOMAIN_CONTROLLER,
    versions.KAI_TOOLS[0],
    versions.VOLCANO_TOOLS[0],
    versions.GROVE_OPERATOR,
)
#: What the testbed reads from each tree besides its Go code.
READ_FROM = {
    versions.LWS_MANAGER.name: ("config/crd/bases", "config/webhook/manifests.yaml"),
    versions.COMPUTE_DOMAIN_CONTROLLER.name: (versions.DRA_DRIVER_CHART, versions.DRA_DRIVER_TEMPLATES),
    versions.KAI_TOOLS[0].name: (versions.KAI_CRDS,),
    versions.VOLCANO_TOOLS[0].name: volcano.CRD_DIRECTORIES,
    versions.GROVE_OPERATOR.name: (grove.CHART,),
}


@dataclasses.dataclass(frozen=True)
class Served:
    """A module laid out in the file proxy from a tree of the third-party directory."""

    module: str
    version: str
    archive: versions.SourceArchive
    directory: str  # the module's root inside the archive ("" for its root)


def served_from_archives() -> list[Served]:
    """Every module the testbed builds, with its nested modules, from the source archive `versions` pins."""
    served: dict[tuple[str, str], Served] = {}
    for tool in BUILT:
        assert tool.source_archive is not None
        top = f"{tool.source_archive.top_directory}/" if tool.source_archive.top_directory else ""
        modules = [
            (tool.module, tool.served_version, tool.module_directory),
            *((nested.module, nested.version, nested.directory) for nested in tool.nested_modules),
        ]
        for module, version, directory in modules:
            served[module, version] = Served(module, version, tool.source_archive, f"{top}{directory}".rstrip("/"))
    return list(served.values())


def source_of(pinned: versions.ThirdPartyFile) -> versions.ModuleFile:
    assert pinned.in_module is not None, f"{pinned.path} is pinned to no module"
    return pinned.in_module


def served_modules() -> list[tuple[str, str]]:
    """(module, version) of every module the tests serve: the built ones with their nested modules, and the CRDs'."""
    built = {(served.module, served.version) for served in served_from_archives()}
    return sorted(built | {(source_of(pinned).module, source_of(pinned).version) for pinned in CRDS})


def tree_of(archive: pathlib.Path, directory: str) -> dict[str, bytes]:
    """The regular files under `directory` of a `.tar.gz`, by path relative to it."""
    prefix = f"{directory}/" if directory else ""
    with tarfile.open(archive) as opened:
        return {
            member.name.removeprefix(prefix): extracted.read()
            for member in opened.getmembers()
            if member.isfile() and member.name.startswith(prefix)
            if (extracted := opened.extractfile(member)) is not None
        }


def lay_out_from_archives(third_party: pathlib.Path, proxy: pathlib.Path) -> None:
    """Serve from `proxy` every module the tests fetch, from the third-party directory's files."""
    from_archives = served_from_archives()
    for served in from_archives:
        tree = tree_of(third_party / served.archive.file.path, served.directory)
        file_proxy.publish(proxy, served.module, served.version, file_proxy.module_files(tree))
    alone: dict[tuple[str, str], dict[str, bytes]] = {}
    for pinned in CRDS:
        source = source_of(pinned)
        if not any((served.module, served.version) == (source.module, source.version) for served in from_archives):
            files = alone.setdefault((source.module, source.version), {"go.mod": f"module {source.module}\n".encode()})
            files[source.path] = (third_party / pinned.path).read_bytes()
    for (module, version), files in alone.items():
        file_proxy.publish(proxy, module, version, files)


@pytest.fixture(scope="module")
def downloaded() -> pathlib.Path | None:
    """Where the variable is unset: the ambient module cache, into which every module the tests serve is downloaded
    through the ambient `GOPROXY` (run first, higher-scoped than `go_from`, so before it swaps the go environment).
    Where it is set: None, the modules being laid out from the directory's files instead."""
    if os.environ.get(thirdparty.ENVIRONMENT_VARIABLE):
        return None
    for module, version in served_modules():
        try:
            thirdparty.downloaded_module(module, version)
        except thirdparty.ThirdPartyError as refused:
            raise RuntimeError(
                f"{thirdparty.ENVIRONMENT_VARIABLE} is not set, so these tests serve the modules downloaded through "
                f"GOPROXY, which does not serve them all: set the variable to the third-party directory ({refused})"
            ) from None
    module_cache = subprocess.run(
        ["go", "env", "GOMODCACHE"], env=thirdparty.go_environment(), capture_output=True, text=True, check=True
    ).stdout.strip()
    return pathlib.Path(module_cache)


@pytest.fixture(scope="module")
def third_party(downloaded: pathlib.Path | None, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The third-party directory: the one the variable names, or else one made of the downloaded CRDs, each at the
    path the directory holds it at (it cannot hold the source archives: see the last test)."""
    if downloaded is None:
        return pathlib.Path(os.environ[thirdparty.ENVIRONMENT_VARIABLE])
    made = tmp_path_factory.mktemp("third_party")
    for pinned in CRDS:
        source = source_of(pinned)
        (made / pinned.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(in_cache(downloaded, source.module, source.version) / source.path, made / pinned.path)
    return made


@pytest.fixture(scope="module")
def laid_out(
    downloaded: pathlib.Path | None, third_party: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> pathlib.Path:
    """A file proxy serving every module the testbed fetches, laid out once."""
    proxy = tmp_path_factory.mktemp("proxy")
    if downloaded is None:
        lay_out_from_archives(third_party, proxy)
    else:
        for module, version in served_modules():
            file_proxy.republish(proxy, downloaded, module, version)
    return proxy


@pytest.fixture
def go_from(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    """The go command with an empty module cache and a file proxy (an empty one until `serve` names another), and
    no third-party directory; yields the module cache, cleaned with the go command (its files are read-only)."""
    module_cache = tmp_path / "gomodcache"
    monkeypatch.delenv(thirdparty.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setenv("MNNVL_TESTBED_CACHE", str(tmp_path / "cache"))
    for name, value in file_proxy.environment(tmp_path / "proxy", module_cache).items():
        monkeypatch.setenv(name, value)
    yield module_cache
    subprocess.run(["go", "clean", "-modcache"], env=thirdparty.go_environment(), check=True)


def serve(proxy: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOPROXY", proxy.as_uri())


def in_cache(module_cache: pathlib.Path, module: str, version: str) -> pathlib.Path:
    return module_cache / f"{file_proxy.escaped(module)}@{file_proxy.escaped(version)}"


def test_each_crd_the_testbed_installs_is_fetched_through_the_proxy_and_passes_its_pin(
    laid_out: pathlib.Path, go_from: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve(laid_out, monkeypatch)
    for pinned in CRDS:
        source = source_of(pinned)
        assert thirdparty.verified_path(pinned) == in_cache(go_from, source.module, source.version) / source.path
        [crd] = thirdparty.documents(pinned)
        assert crd["kind"] == "CustomResourceDefinition"


def test_each_source_tree_the_testbed_builds_from_resolves_through_the_proxy_to_its_module(
    laid_out: pathlib.Path, go_from: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve(laid_out, monkeypatch)
    for tool in BUILT:
        tree = building.module_tree(tool)
        assert tree == in_cache(go_from, tool.module, tool.served_version)
        assert (tree / "go.mod").read_text().startswith(f"module {tool.module}\n")
        for path in READ_FROM[tool.name]:
            assert (tree / path).exists(), f"{tool.module}@{tool.served_version} has no {path}"
        # The go.mod's directory replaces, which a tree from the proxy cannot honour, are each accounted for.
        go_mod = subprocess.run(
            ["go", "mod", "edit", "-json"], cwd=tree, capture_output=True, text=True, check=True
        ).stdout
        building.proxy_tree_edits(json.loads(go_mod), tool.nested_modules)
    for module, directory in grove.CRD_DIRECTORIES:
        assert sorted((building.module_tree(versions.GROVE_OPERATOR, module) / directory).glob("*.yaml"))


def test_a_file_that_differs_from_its_pin_is_refused_naming_it_both_sha256s_and_the_module(
    third_party: pathlib.Path, go_from: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned = versions.TOPOLOGY_CRDS["kai-v0.17.0"].kai_topology
    source = source_of(pinned)
    altered = bytearray((third_party / pinned.path).read_bytes())
    altered[-2] ^= 1  # one byte of the last line
    proxy = tmp_path / "altered"
    file_proxy.publish(
        proxy,
        source.module,
        source.version,
        {"go.mod": f"module {source.module}\n".encode(), source.path: bytes(altered)},
    )
    serve(proxy, monkeypatch)
    with pytest.raises(thirdparty.ThirdPartyError) as refused:
        thirdparty.verified_path(pinned)
    path = in_cache(go_from, source.module, source.version) / source.path
    assert str(refused.value) == (
        f"{path} has sha256 {thirdparty.sha256_of(path)}, not the pinned {pinned.sha256}: {source.path} of "
        f"{source.module}@{source.version} is not the upstream file"
    )


def test_a_module_the_proxy_lacks_is_one_message_naming_it_its_version_and_the_variable(
    go_from: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve(tmp_path / "empty", monkeypatch)
    pinned = versions.GROVE_BINDING_CRD
    with pytest.raises(thirdparty.ThirdPartyError) as refused:
        thirdparty.verified_path(pinned)
    message = str(refused.value)
    assert message.startswith(
        "github.com/ai-dynamo/grove/operator/api v0.1.0-alpha.11 is not served by the Go module proxy ("
    )
    assert message.endswith(
        ") and MNNVL_TESTBED_THIRD_PARTY is not set: set it to a directory holding "
        f"{pinned.path} (sha256 {pinned.sha256}), or use a GOPROXY that serves "
        "github.com/ai-dynamo/grove/operator/api@v0.1.0-alpha.11"
    )
    assert "\n" not in message
    tool = versions.COMPUTE_DOMAIN_CONTROLLER
    with pytest.raises(building.BuildError) as refused_tool:
        building.source_dir(tool)
    assert str(refused_tool.value).startswith(f"{tool.module} {tool.served_version} is not served by the Go module")
    assert str(refused_tool.value).endswith(f", or use a GOPROXY that serves {tool.module}@{tool.served_version}")
    assert not go_from.exists() or not any(go_from.glob("*/*@*"))


def test_with_the_variable_set_the_directory_wins_and_nothing_is_downloaded(
    downloaded: pathlib.Path | None,
    third_party: pathlib.Path,
    laid_out: pathlib.Path,
    go_from: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serve(laid_out, monkeypatch)
    monkeypatch.setenv(thirdparty.ENVIRONMENT_VARIABLE, str(third_party))
    for pinned in CRDS:
        assert thirdparty.verified_path(pinned) == third_party / pinned.path
    tool = versions.LWS_MANAGER
    if downloaded is None:
        assert building.source_dir(tool) == building.cache_root() / "sources" / "lws-v0.10.0-src"
    else:
        # A made directory cannot hold the source archive (pinned as upstream's tarball, which no module zip
        # rebuilds byte for byte): that the tool is looked for there, although the proxy serves its module, is
        # the directory winning.
        archive = versions.LWS_SOURCE_ARCHIVE.file
        with pytest.raises(building.BuildError) as refused:
            building.source_dir(tool)
        assert str(refused.value) == (
            f"{tool.module} {tool.version} is built from its source archive ({thirdparty.ENVIRONMENT_VARIABLE} is "
            f"set) and its source archive is not usable: {third_party / archive.path} does not exist: "
            f"{thirdparty.ENVIRONMENT_VARIABLE}={third_party} must hold {archive.path} (sha256 {archive.sha256})"
        )
    assert not go_from.exists()
