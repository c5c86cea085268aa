"""Builds the control-plane binaries from their Go modules, cached outside the repo by version.

Each tool gets its own wrapper module because the upstream modules pin incompatible k8s.io versions; a tool
whose go.mod pins versions with `replace` is built in its own module instead. A warm cache makes
`ensure_binaries` a handful of `stat` calls. Where the third-party directory is named (for proxies that refuse
some modules while serving their dependencies), a tool with a pinned source archive is built from that archive,
unpacked under `<cache>/sources/`: in its own module, or through a directory `replace` in the wrapper module.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from . import thirdparty, versions

_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", re.MULTILINE)


class BuildError(RuntimeError):
    """A Go build failed; the message carries the command and the tail of its output."""


def cache_root() -> pathlib.Path:
    configured = os.environ.get("MNNVL_TESTBED_CACHE")
    if configured:
        return pathlib.Path(configured)
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "mnnvl-testbed"


def binary_path(tool: versions.GoTool) -> pathlib.Path:
    return cache_root() / "bin" / f"{tool.name}-{tool.version}" / tool.name


def module_dir(module: str, version: str) -> pathlib.Path:
    """Download a module into the Go module cache and return its source directory; a refused module is a
    BuildError."""
    try:
        return thirdparty.downloaded_module(module, version)
    except thirdparty.ThirdPartyError as refused:
        raise BuildError(str(refused)) from None


def chosen_archive(tool: versions.GoTool, third_party_directory: pathlib.Path | None) -> versions.SourceArchive | None:
    """The source archive the tool is built from, or None where its module comes from the module proxy: always for
    an archive-only tool, for any other whenever the third-party directory is named (it overrides the proxy)."""
    return tool.source_archive if tool.archive_only or third_party_directory is not None else None


def source_dir(tool: versions.GoTool) -> pathlib.Path:
    """The tool's source: its module's tree in the module cache, or its unpacked source archive (the repository's
    layout, where the module may be in a subdirectory)."""
    directory, _ = _source(tool)
    return directory


def module_tree(tool: versions.GoTool, module: str | None = None) -> pathlib.Path:
    """Where the files of `module` are: the tool's own module by default, else one of its nested modules, which the
    archive holds in its directory and the proxy serves on its own."""
    source, from_archive = _source(tool)
    if module is None:
        return source / tool.module_directory if from_archive else source
    nested = {nested.module: nested for nested in tool.nested_modules}[module]
    return source / nested.directory if from_archive else module_dir(nested.module, nested.version)


def _source(tool: versions.GoTool) -> tuple[pathlib.Path, bool]:
    """(source directory, whether it was unpacked from the tool's source archive)."""
    archive = chosen_archive(tool, thirdparty.directory())
    if archive is not None:
        why = "only (no module proxy serves it)" if tool.archive_only else f"({thirdparty.ENVIRONMENT_VARIABLE} is set)"
        reason = f"{tool.module} {tool.version} is built from its source archive {why}"
        return unpacked_archive(archive, reason=reason), True
    try:
        return module_dir(tool.module, tool.served_version), False
    except BuildError as refused:
        if tool.source_archive is None:
            raise
        raise BuildError(
            thirdparty.not_served(tool.module, tool.served_version, str(refused), tool.source_archive.file)
        ) from None


def unpacked_archive(archive: versions.SourceArchive, *, reason: str) -> pathlib.Path:
    """The archive's tree under `<cache>/sources/<archive name>`, unpacked once its sha256 is checked; `reason`
    says, in errors, why the archive is needed.

    The archive is required (and checked) on every use, even when an unpacked tree is cached: the tree is a
    cache of the archive, not a source of its own.
    """
    if thirdparty.directory() is None:
        raise BuildError(
            f"{reason} and {thirdparty.ENVIRONMENT_VARIABLE} is not set: set it to a directory holding "
            f"{archive.file.path} (sha256 {archive.file.sha256})"
        )
    try:
        tarball = thirdparty.verified_path(archive.file)
    except thirdparty.ThirdPartyError as unusable:
        raise BuildError(f"{reason} and its source archive is not usable: {unusable}") from unusable
    target = cache_root() / "sources" / archive.name
    marker = target / ".mnnvl-testbed-sha256"  # Go ignores dot files
    if marker.is_file() and marker.read_text().strip() == archive.file.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        destination = pathlib.Path(scratch) / "unpacked"
        with tarfile.open(tarball) as opened:
            opened.extractall(destination, filter="data")
        unpacked = destination if archive.top_directory is None else destination / archive.top_directory
        if not unpacked.is_dir():
            raise BuildError(f"{tarball} does not unpack to {archive.top_directory}/")
        (unpacked / marker.name).write_text(archive.file.sha256 + "\n")
        if target.exists():
            shutil.rmtree(target)
        unpacked.replace(target)
    return target


def staging_modules(kubernetes_version: str) -> list[str]:
    """The k8s.io staging modules that k8s.io/kubernetes replaces with local paths."""
    info = json.loads(
        _go("mod", "download", "-json", f"k8s.io/kubernetes@{kubernetes_version}", cwd=pathlib.Path.cwd())
    )
    go_mod = pathlib.Path(info["GoMod"]).read_text()
    return sorted(set(_STAGING_REPLACE.findall(go_mod)))


def ensure_binaries(tools: tuple[versions.GoTool, ...] = versions.ALL_TOOLS) -> dict[str, pathlib.Path]:
    """Return the path of every tool, building those missing from the cache. Processes share the cache (tests
    and a demo with state directories of their own, say): one builds a tool while the others wait for it."""
    paths: dict[str, pathlib.Path] = {}
    for tool in tools:
        target = binary_path(tool)
        if not target.exists():
            with building(tool):
                if not target.exists():  # built by another process while this one waited
                    started = time.monotonic()
                    _build(tool, target)
                    print(f"built {tool.name} {tool.version} in {time.monotonic() - started:.0f}s", flush=True)
        paths[tool.name] = target
    return paths


@contextlib.contextmanager
def building(tool: versions.GoTool) -> Iterator[None]:
    """Held while `tool` is built: an exclusive lock on a file of the cache (released by the OS if the holder dies)."""
    lock = lock_path(tool)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lock_path(tool: versions.GoTool) -> pathlib.Path:
    return cache_root() / "locks" / f"{tool.name}-{tool.version}.lock"


def _build(tool: versions.GoTool, target: pathlib.Path) -> None:
    work = cache_root() / "modules" / f"{tool.name}-{tool.version}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if tool.own_module or tool.archive_only:  # an archive is built as it unpacks: in its own module
        _build_in_own_module(tool, target, work)
        return
    (work / "go.mod").write_text(f"module mnnvl.local/testbed/{tool.name}\n\ngo 1.26\n")
    if tool.replace_staging_of:
        replaces = [f"-replace={name}={name}@{versions.STAGING_VERSION}" for name in staging_modules(tool.version)]
        _go("mod", "edit", *replaces, cwd=work)
    if tool.main_source is not None:
        (work / "main.go").write_text(tool.main_source)
        _go("get", f"{tool.module}@{tool.version}", cwd=work)
        _go("mod", "tidy", cwd=work)
    elif tool.source_archive is not None and (source := _source(tool))[1]:
        # The module itself is refused, its dependencies are served: point the module at the unpacked tree.
        _go(
            "mod",
            "edit",
            f"-require={tool.module}@{tool.version}",
            f"-replace={tool.module}={source[0]}",
            f"-tool={tool.package}",
            cwd=work,
        )
        # No `go mod tidy`: it also resolves the imports of the module's own tests, which the archive leaves
        # out; `go build -mod=mod` records just what the tool needs.
    else:
        _go("get", "-tool", f"{tool.package}@{tool.version}", cwd=work)
    _go_build(tool, target, cwd=work)


def _build_in_own_module(tool: versions.GoTool, target: pathlib.Path, work: pathlib.Path) -> None:
    """Build the tool as the main module of its own tree. An unpacked archive with a vendor directory builds from it
    (nothing is downloaded). Otherwise the dependencies come from the module proxy, with a copy of the module's
    go.mod (`-modfile`, in the empty directory `work`) so that the tree stays as it is (a tree in the module cache
    is read-only): in an archive, dependencies the proxy refuses are replaced by their unpacked archives; in a tree
    from the proxy, which has neither nested modules nor vendored packages, nested modules by their own modules."""
    tree, from_archive = _source(tool)
    source = tree / tool.module_directory if from_archive else tree
    if from_archive and (source / "vendor" / "modules.txt").is_file():
        _go_build(tool, target, cwd=source, mod="-mod=vendor")
        return
    if from_archive:
        reason = f"{tool.module} {tool.version} depends on modules no module proxy here serves"
        edits = [
            f"-replace={module}={unpacked_archive(archive, reason=reason)}"
            for module, archive in tool.replaced_by_archives
        ]
    else:
        edits = proxy_tree_edits(json.loads(_go("mod", "edit", "-json", cwd=source)), tool.nested_modules)
    modfile = work / "go.mod"
    shutil.copyfile(source / "go.mod", modfile)
    if (source / "go.sum").is_file():
        shutil.copyfile(source / "go.sum", work / "go.sum")
    if edits:
        _go("mod", "edit", *edits, str(modfile), cwd=source)
    _go_build(tool, target, cwd=source, mod=f"-mod=mod -modfile={modfile}")


def proxy_tree_edits(go_mod: dict[str, Any], nested_modules: tuple[versions.NestedModule, ...]) -> list[str]:
    """`go mod edit` flags that make a module's go.mod (as `go mod edit -json` reads it) build in a tree from the
    module proxy, which holds no nested module: a directory `replace` of a nested module becomes a replace by that
    module at its pinned version, and one of a module the build does not require is dropped."""
    nested = {module.module: module for module in nested_modules}
    required = {requirement["Path"] for requirement in go_mod.get("Require") or ()}
    edits = []
    for replace in go_mod.get("Replace") or ():
        old, new = replace["Old"]["Path"], replace["New"]["Path"]
        if not new.startswith(("./", "../")):
            continue
        if old in nested:
            edits.append(f"-replace={old}={old}@{nested[old].version}")
        elif old in required:
            raise BuildError(f"go.mod replaces {old} with {new}, a directory a module zip leaves out: pin it as nested")
        else:
            edits.append(f"-dropreplace={old}")
    return edits


def _go_build(tool: versions.GoTool, target: pathlib.Path, *, cwd: pathlib.Path, mod: str = "-mod=mod") -> None:
    """`go build` the tool's package in module `cwd` into a scratch file, then move it to `target` in one step, so a
    half-written binary is never taken for a built one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = pathlib.Path(scratch) / tool.name
        # No symbol table or DWARF (-s -w): nobody debugs these binaries, and leaving them out shortens each link.
        ldflags = " ".join(("-s", "-w", *tool.ldflags))
        _go("build", "-ldflags", ldflags, "-o", str(built), tool.package, cwd=cwd, mod=mod)
        built.replace(target)


def _go(*args: str, cwd: pathlib.Path, mod: str = "-mod=mod") -> str:
    env = thirdparty.go_environment(CGO_ENABLED="0", GOFLAGS=mod)
    result = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise BuildError(f"`go {' '.join(args)}` failed in {cwd}:\n{tail}")
    return result.stdout
