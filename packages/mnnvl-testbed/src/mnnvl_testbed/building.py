"""Builds the control-plane binaries from their Go modules, cached outside the repo by version.

Each tool gets its own wrapper module because the upstream modules pin incompatible k8s.io versions.
A warm cache makes `ensure_binaries` a handful of `stat` calls. A module the proxy refuses, but whose
dependencies it serves, is built from its pinned source archive in the third-party directory, unpacked
under `<cache>/sources/` and used through a directory `replace` in the wrapper module.
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

from . import thirdparty, versions

_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", re.MULTILINE)


class BuildError(RuntimeError):
    """A Go build failed; the message carries the command and the tail of its output."""

    def __init__(self, message: str, *, output: str = "") -> None:
        super().__init__(message)
        self.output = output  # the command's whole standard output, when a command failed


def cache_root() -> pathlib.Path:
    configured = os.environ.get("MNNVL_TESTBED_CACHE")
    if configured:
        return pathlib.Path(configured)
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "mnnvl-testbed"


def binary_path(tool: versions.GoTool) -> pathlib.Path:
    return cache_root() / "bin" / f"{tool.name}-{tool.version}" / tool.name


def module_dir(module: str, version: str) -> pathlib.Path:
    """Download a module into the Go module cache and return its source directory."""
    try:
        output = _go("mod", "download", "-json", f"{module}@{version}", cwd=pathlib.Path.cwd())
    except BuildError as failed:
        output = failed.output  # `-json` reports a refused module as an `Error` field, exiting non-zero
    try:
        info = json.loads(output)
    except json.JSONDecodeError:
        raise BuildError(f"go mod download {module}@{version} failed: {output.strip()}") from None
    if "Error" in info:
        raise BuildError(f"go mod download {module}@{version}: {info['Error']}")
    return pathlib.Path(info["Dir"])


def source_dir(tool: versions.GoTool) -> pathlib.Path:
    """The tool module's source tree: from the module cache where the proxy serves it, else its source archive."""
    directory, _ = _source(tool)
    return directory


def _source(tool: versions.GoTool) -> tuple[pathlib.Path, bool]:
    """(source directory, whether it was unpacked from the tool's source archive)."""
    if tool.archive_only:
        assert tool.source_archive is not None, f"{tool.name} is archive-only but names no source archive"
        reason = f"{tool.module} {tool.version} is built from its source archive only (no module proxy serves it)"
        return unpacked_archive(tool.source_archive, reason=reason), True
    try:
        return module_dir(tool.module, tool.version), False
    except BuildError as refused:
        if tool.source_archive is None:
            raise
        reason = f"{tool.module} {tool.version} is not served by the Go module proxy ({' '.join(str(refused).split())})"
        return unpacked_archive(
            tool.source_archive, reason=reason, otherwise=f"a GOPROXY that serves {tool.module}@{tool.version}"
        ), True


def unpacked_archive(archive: versions.SourceArchive, *, reason: str, otherwise: str | None = None) -> pathlib.Path:
    """The archive's tree under `<cache>/sources/<archive name>`, unpacked once its sha256 is checked; `reason`
    says, in errors, why the archive is needed, and `otherwise` what could be used instead.

    The archive is required (and checked) on every use, even when an unpacked tree is cached: the tree is a
    cache of the archive, not a source of its own.
    """
    if thirdparty.directory() is None:
        raise BuildError(
            f"{reason} and {thirdparty.ENVIRONMENT_VARIABLE} is not set: set it to a directory holding "
            f"{archive.file.path} (sha256 {archive.file.sha256}){f', or use {otherwise}' if otherwise else ''}"
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
    if tool.archive_only:
        _build_in_archive(tool, target, work)
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


def _build_in_archive(tool: versions.GoTool, target: pathlib.Path, work: pathlib.Path) -> None:
    """Build the tool in its unpacked archive, as its own module: from its vendor directory where it has one (then
    nothing is downloaded), else with its dependencies from the module proxy, those the proxy refuses replaced by
    their unpacked archives in a copy of the module's go.mod (`-modfile`, in the empty directory `work`), so the
    unpacked tree stays as unpacked."""
    source = _source(tool)[0] / tool.module_directory
    if (source / "vendor" / "modules.txt").is_file():
        _go_build(tool, target, cwd=source, mod="-mod=vendor")
        return
    mode = "-mod=mod"
    if tool.replaced_by_archives:
        modfile = work / "go.mod"
        shutil.copyfile(source / "go.mod", modfile)
        shutil.copyfile(source / "go.sum", work / "go.sum")
        reason = f"{tool.module} {tool.version} depends on modules no module proxy here serves"
        replaces = [
            f"-replace={module}={unpacked_archive(archive, reason=reason)}"
            for module, archive in tool.replaced_by_archives
        ]
        _go("mod", "edit", *replaces, str(modfile), cwd=source)
        mode = f"-mod=mod -modfile={modfile}"
    _go_build(tool, target, cwd=source, mod=mode)


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
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": mod, "GOTOOLCHAIN": "local"}
    result = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise BuildError(f"`go {' '.join(args)}` failed in {cwd}:\n{tail}", output=result.stdout)
    return result.stdout
