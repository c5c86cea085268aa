"""Upstream files the testbed needs beyond the modules it builds: from their Go modules, or from the directory
`MNNVL_TESTBED_THIRD_PARTY` names.

Each file is pinned in `versions.py` by its sha256 (the same pin wherever it comes from) and checked before every
use, so the testbed runs exactly the upstream bytes. A file a Go module holds is fetched with `go mod download` at
its pinned version, the go command's module cache being the cache. Some proxies refuse these modules (403) while
serving their dependencies: where the variable is set, its directory overrides the proxy and is read alone, the
upstream CRDs as `crds/<project>-<release>/<file>.yaml`, the modules the testbed builds as source archives. Nothing
is ever copied into this repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
from typing import Any

import yaml

from . import versions

ENVIRONMENT_VARIABLE = "MNNVL_TESTBED_THIRD_PARTY"


class ThirdPartyError(RuntimeError):
    """A pinned third-party file is missing or differs from its pin; the message says which and how to fix it."""


def directory() -> pathlib.Path | None:
    configured = os.environ.get(ENVIRONMENT_VARIABLE)
    return pathlib.Path(configured).expanduser() if configured else None


def module_source(
    pinned: versions.ThirdPartyFile, third_party_directory: pathlib.Path | None
) -> versions.ModuleFile | None:
    """The module file `pinned` is fetched as, or None where it is read from the third-party directory: whenever
    the directory is named (it overrides the module proxy), and for a file no module holds."""
    return pinned.in_module if third_party_directory is None else None


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def go_environment(**settings: str) -> dict[str, str]:
    """The environment of every go command the testbed runs: the local toolchain only, never one downloaded for a
    module's `go` line, plus `settings`."""
    return {**os.environ, "GOTOOLCHAIN": "local", **settings}


def downloaded_module(module: str, version: str) -> pathlib.Path:
    """The module's tree in the go command's module cache, downloaded through the module proxy when missing."""
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        env=go_environment(GOFLAGS="-mod=mod"),
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        info = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise ThirdPartyError(f"go mod download {module}@{version} failed: {result.stderr.strip()}") from None
    if "Error" in info:  # `-json` reports a refused module as an `Error` field, exiting non-zero
        raise ThirdPartyError(f"go mod download {module}@{version}: {info['Error']}")
    return pathlib.Path(info["Dir"])


def not_served(module: str, version: str, refused: str, instead: versions.ThirdPartyFile) -> str:
    """The one message for a module the proxy refuses while no third-party directory is named: the module, the
    version, why, and the two ways out."""
    return (
        f"{module} {version} is not served by the Go module proxy ({' '.join(refused.split())}) and "
        f"{ENVIRONMENT_VARIABLE} is not set: set it to a directory holding {instead.path} (sha256 {instead.sha256}), "
        f"or use a GOPROXY that serves {module}@{version}"
    )


def verified_path(pinned: versions.ThirdPartyFile) -> pathlib.Path:
    """Where `pinned` is, once its sha256 matches the pin."""
    root = directory()
    if (source := module_source(pinned, root)) is not None:
        return _verified_module_file(pinned, source)
    if root is None:
        raise ThirdPartyError(
            f"{ENVIRONMENT_VARIABLE} is not set: set it to the directory that holds {pinned.path} "
            f"(sha256 {pinned.sha256}); docs/testbed.md lists its files and where they come from"
        )
    path = root / pinned.path
    if not path.is_file():
        raise ThirdPartyError(
            f"{path} does not exist: {ENVIRONMENT_VARIABLE}={root} must hold {pinned.path} (sha256 {pinned.sha256})"
        )
    return _checked(path, pinned, "use the upstream file as is")


def _verified_module_file(pinned: versions.ThirdPartyFile, source: versions.ModuleFile) -> pathlib.Path:
    try:
        tree = downloaded_module(source.module, source.version)
    except ThirdPartyError as refused:
        raise ThirdPartyError(not_served(source.module, source.version, str(refused), pinned)) from None
    path = tree / source.path
    if not path.is_file():
        raise ThirdPartyError(f"{source.module}@{source.version} has no {source.path}")
    return _checked(path, pinned, f"{source.path} of {source.module}@{source.version} is not the upstream file")


def _checked(path: pathlib.Path, pinned: versions.ThirdPartyFile, remedy: str) -> pathlib.Path:
    found = sha256_of(path)
    if found != pinned.sha256:
        raise ThirdPartyError(f"{path} has sha256 {found}, not the pinned {pinned.sha256}: {remedy}")
    return path


def documents(pinned: versions.ThirdPartyFile) -> list[dict[str, Any]]:
    """The YAML documents of a pinned file (empty documents dropped)."""
    return [document for document in yaml.safe_load_all(verified_path(pinned).read_text()) if document]
