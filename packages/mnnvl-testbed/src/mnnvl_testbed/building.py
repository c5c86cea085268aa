"""Builds the control-plane binaries from their Go modules, cached outside the repo by version.

Each tool gets its own wrapper module because the upstream modules pin incompatible k8s.io versions.
A warm cache makes `ensure_binaries` a handful of `stat` calls.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time

from . import versions

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
    """Download a module into the Go module cache and return its source directory."""
    info = json.loads(_go("mod", "download", "-json", f"{module}@{version}", cwd=pathlib.Path.cwd()))
    if "Error" in info:
        raise BuildError(f"go mod download {module}@{version}: {info['Error']}")
    return pathlib.Path(info["Dir"])


def staging_modules(kubernetes_version: str) -> list[str]:
    """The k8s.io staging modules that k8s.io/kubernetes replaces with local paths."""
    info = json.loads(
        _go("mod", "download", "-json", f"k8s.io/kubernetes@{kubernetes_version}", cwd=pathlib.Path.cwd())
    )
    go_mod = pathlib.Path(info["GoMod"]).read_text()
    return sorted(set(_STAGING_REPLACE.findall(go_mod)))


def ensure_binaries(tools: tuple[versions.GoTool, ...] = versions.ALL_TOOLS) -> dict[str, pathlib.Path]:
    """Return the path of every tool, building those missing from the cache."""
    paths: dict[str, pathlib.Path] = {}
    for tool in tools:
        target = binary_path(tool)
        if not target.exists():
            started = time.monotonic()
            _build(tool, target)
            print(f"built {tool.name} {tool.version} in {time.monotonic() - started:.0f}s", flush=True)
        paths[tool.name] = target
    return paths


def _build(tool: versions.GoTool, target: pathlib.Path) -> None:
    work = cache_root() / "modules" / f"{tool.name}-{tool.version}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "go.mod").write_text(f"module mnnvl.local/testbed/{tool.name}\n\ngo 1.26\n")
    if tool.replace_staging_of:
        replaces = [f"-replace={name}={name}@{versions.STAGING_VERSION}" for name in staging_modules(tool.version)]
        _go("mod", "edit", *replaces, cwd=work)
    if tool.main_source is not None:
        (work / "main.go").write_text(tool.main_source)
        _go("get", f"{tool.module}@{tool.version}", cwd=work)
        _go("mod", "tidy", cwd=work)
    else:
        _go("get", "-tool", f"{tool.package}@{tool.version}", cwd=work)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = pathlib.Path(scratch) / tool.name
        _go("build", "-ldflags", " ".join(tool.ldflags), "-o", str(built), tool.package, cwd=work)
        built.replace(target)


def _go(*args: str, cwd: pathlib.Path) -> str:
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    result = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise BuildError(f"`go {' '.join(args)}` failed in {cwd}:\n{tail}")
    return result.stdout
