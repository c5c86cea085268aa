"""Files from the third-party directory are used only as pinned, and a module the proxy refuses is built from its
source archive, or `up` says exactly what is missing."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import pathlib
import subprocess
import tarfile

import pytest

from mnnvl_testbed import building, thirdparty, versions

REFUSED = (
    "go mod download example.com/tool@v1.2.3: example.com/tool@v1.2.3: reading "
    "https://proxy.golang.org/example.com/tool/@v/v1.2.3.zip: 403 Forbidden\n\tserver response: not available."
)


def packed(directory: pathlib.Path, file_name: str, files: dict[str, str]) -> versions.ThirdPartyFile:
    """`files` (path → text) as a `.tar.gz` in `directory`, pinned by its real sha256."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    (directory / file_name).write_bytes(buffer.getvalue())
    return versions.ThirdPartyFile(path=file_name, sha256=hashlib.sha256(buffer.getvalue()).hexdigest())


def source_archive(directory: pathlib.Path, top: str | None = "tool-v1.2.3") -> versions.SourceArchive:
    """A tiny module tree in `directory` (under `top`, or at its root)."""
    prefix = f"{top}/" if top else ""
    files = {f"{prefix}go.mod": "module example.com/tool\n", f"{prefix}config/crd.yaml": "kind: X\n"}
    return versions.SourceArchive(file=packed(directory, "tool-v1.2.3-src.tar.gz", files), top_directory=top)


def tool(archive: versions.SourceArchive) -> versions.GoTool:
    return versions.GoTool(
        name="tool", module="example.com/tool", version="v1.2.3", package="example.com/tool/cmd", source_archive=archive
    )


@pytest.fixture
def refused_by_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(module: str, version: str) -> pathlib.Path:
        raise building.BuildError(REFUSED)

    monkeypatch.setattr(building, "module_dir", refuse)


@pytest.fixture
def cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setenv("MNNVL_TESTBED_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.usefixtures("refused_by_the_proxy", "cache")
def test_a_refused_module_without_the_variable_fails_naming_the_module_the_version_and_the_variable(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(thirdparty.ENVIRONMENT_VARIABLE, raising=False)
    archive = source_archive(tmp_path)
    with pytest.raises(building.BuildError) as failure:
        building.source_dir(tool(archive))
    assert str(failure.value) == (
        "example.com/tool v1.2.3 is not served by the Go module proxy (go mod download example.com/tool@v1.2.3: "
        "example.com/tool@v1.2.3: reading https://proxy.golang.org/example.com/tool/@v/v1.2.3.zip: 403 Forbidden "
        "server response: not available.) and MNNVL_TESTBED_THIRD_PARTY is not set: set it to a directory holding "
        f"tool-v1.2.3-src.tar.gz (sha256 {archive.file.sha256}), or use a GOPROXY that serves example.com/tool@v1.2.3"
    )


@pytest.mark.usefixtures("refused_by_the_proxy")
def test_a_refused_module_is_unpacked_from_its_pinned_archive_once(
    tmp_path: pathlib.Path, cache: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(thirdparty.ENVIRONMENT_VARIABLE, str(tmp_path))
    archive = source_archive(tmp_path)
    source = building.source_dir(tool(archive))
    assert source == cache / "sources" / "tool-v1.2.3-src"
    assert (source / "config" / "crd.yaml").read_text() == "kind: X\n"
    (source / "config" / "crd.yaml").write_text("kind: Y\n")  # a reused tree is not unpacked again
    assert building.source_dir(tool(archive)) == source
    assert (source / "config" / "crd.yaml").read_text() == "kind: Y\n"
    assert sorted(path.name for path in (cache / "sources").iterdir()) == ["tool-v1.2.3-src"]


def test_an_archive_only_tool_never_asks_the_proxy_and_unpacks_an_archive_without_a_top_directory(
    tmp_path: pathlib.Path, cache: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def asked(module: str, version: str) -> pathlib.Path:
        raise AssertionError(f"the proxy was asked for {module}@{version}")

    monkeypatch.setattr(building, "module_dir", asked)
    archive = source_archive(tmp_path, top=None)
    archive_only = dataclasses.replace(tool(archive), archive_only=True)
    monkeypatch.delenv(thirdparty.ENVIRONMENT_VARIABLE, raising=False)
    with pytest.raises(building.BuildError) as failure:
        building.source_dir(archive_only)
    assert str(failure.value) == (
        "example.com/tool v1.2.3 is built from its source archive only (no module proxy serves it) and "
        "MNNVL_TESTBED_THIRD_PARTY is not set: set it to a directory holding "
        f"tool-v1.2.3-src.tar.gz (sha256 {archive.file.sha256})"
    )
    monkeypatch.setenv(thirdparty.ENVIRONMENT_VARIABLE, str(tmp_path))
    source = building.source_dir(archive_only)
    assert source == cache / "sources" / "tool-v1.2.3-src"
    assert (source / "go.mod").read_text() == "module example.com/tool\n"


@pytest.mark.usefixtures("refused_by_the_proxy", "cache")
def test_an_archive_that_differs_from_its_pin_is_never_unpacked(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(thirdparty.ENVIRONMENT_VARIABLE, str(tmp_path))
    archive = source_archive(tmp_path)
    altered = versions.SourceArchive(
        file=versions.ThirdPartyFile(path=archive.file.path, sha256="0" * 64), top_directory=archive.top_directory
    )
    with pytest.raises(
        building.BuildError,
        match=r"and its source archive is not usable: .* has sha256 [0-9a-f]{64}, not the pinned 0{64}",
    ):
        building.source_dir(tool(altered))


def test_a_pinned_file_missing_from_the_directory_is_named_with_the_directory(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(thirdparty.ENVIRONMENT_VARIABLE, str(tmp_path))
    pinned = versions.COMPUTE_DOMAIN_CRDS[versions.COMPUTE_DOMAIN_CRD].file
    with pytest.raises(thirdparty.ThirdPartyError) as failure:
        thirdparty.verified_path(pinned)
    assert str(failure.value) == (
        f"{tmp_path / pinned.path} does not exist: MNNVL_TESTBED_THIRD_PARTY={tmp_path} must hold {pinned.path} "
        f"(sha256 {pinned.sha256})"
    )


def test_a_served_module_is_used_from_the_module_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(thirdparty.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(building, "module_dir", lambda module, version: tmp_path / f"{module}@{version}")
    assert building.source_dir(versions.LWS_MANAGER) == tmp_path / f"sigs.k8s.io/lws@{versions.LWS_VERSION}"


def test_lws_is_pinned_at_v0_10_0_with_its_source_archive() -> None:
    assert versions.LWS_MANAGER.version == "v0.10.0"
    assert versions.LWS_MANAGER.source_archive == versions.SourceArchive(
        file=versions.ThirdPartyFile(
            path="lws-v0.10.0-src.tar.gz", sha256="88e76b33e0891784f588fa21e00d70d516ef39891cc7d906808ae2571e650ea6"
        ),
        top_directory="lws-v0.10.0",
    )


@pytest.mark.usefixtures("cache")
def test_an_archive_only_tool_in_a_subdirectory_builds_with_refused_dependencies_replaced_by_their_archives(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Grove's operator is built: its module in `operator/` with a relative `replace` of its own, and a dependency
    no proxy serves taken from that dependency's archive; the unpacked trees are left as unpacked."""
    go_mod = (
        "module example.com/tool/operator\n\ngo 1.26\n\nrequire (\n\texample.com/dep v1.0.0\n"
        "\texample.com/tool/api v0.0.0\n)\n\nreplace example.com/tool/api => ../api\n"
    )
    main = (
        'package main\n\nimport (\n\t"fmt"\n\n\t"example.com/dep"\n\t"example.com/tool/api"\n)\n\n'
        "func main() { fmt.Println(dep.Name, api.Name) }\n"
    )
    tool_archive = packed(
        tmp_path,
        "tool-src.tar.gz",
        {
            "operator/go.mod": go_mod,
            "operator/go.sum": "",
            "operator/cmd/main.go": main,
            "api/go.mod": "module example.com/tool/api\n\ngo 1.26\n",
            "api/api.go": 'package api\n\nconst Name = "api"\n',
        },
    )
    dep_archive = packed(
        tmp_path,
        "dep-src.tar.gz",
        {"go.mod": "module example.com/dep\n\ngo 1.26\n", "dep.go": 'package dep\n\nconst Name = "dep"\n'},
    )
    monkeypatch.setenv(thirdparty.ENVIRONMENT_VARIABLE, str(tmp_path))
    monkeypatch.setenv("GOPROXY", "off")  # nothing may come from a proxy
    operator = versions.GoTool(
        name="operator",
        module="example.com/tool/operator",
        version="v1.0.0",
        package="example.com/tool/operator/cmd",
        source_archive=versions.SourceArchive(file=tool_archive, top_directory=None),
        archive_only=True,
        module_directory="operator",
        replaced_by_archives=(("example.com/dep", versions.SourceArchive(file=dep_archive, top_directory=None)),),
    )
    built = building.ensure_binaries((operator,))["operator"]
    assert subprocess.run([built], capture_output=True, text=True, check=True).stdout == "dep api\n"
    assert (building.source_dir(operator) / "operator" / "go.mod").read_text() == go_mod
