"""Upstream files the testbed needs but no module proxy here serves, read from `MNNVL_TESTBED_THIRD_PARTY`.

The directory holds upstream CRDs (`crds/<project>-<release>/<file>.yaml`) and, for modules a proxy refuses,
source archives. Each file is pinned by its sha256 in `versions.py` and checked before every use, so the
testbed runs exactly the upstream bytes. Nothing is ever copied into this repository.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
from typing import Any

import yaml

from . import versions

ENVIRONMENT_VARIABLE = "MNNVL_TESTBED_THIRD_PARTY"


class ThirdPartyError(RuntimeError):
    """A pinned third-party file is missing or differs from its pin; the message says which and how to fix it."""


def directory() -> pathlib.Path | None:
    configured = os.environ.get(ENVIRONMENT_VARIABLE)
    return pathlib.Path(configured).expanduser() if configured else None


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verified_path(pinned: versions.ThirdPartyFile) -> pathlib.Path:
    """Where `pinned` is, once its sha256 matches the pin."""
    root = directory()
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
    found = sha256_of(path)
    if found != pinned.sha256:
        raise ThirdPartyError(f"{path} has sha256 {found}, not the pinned {pinned.sha256}: use the upstream file as is")
    return path


def documents(pinned: versions.ThirdPartyFile) -> list[dict[str, Any]]:
    """The YAML documents of a pinned file (empty documents dropped)."""
    return [document for document in yaml.safe_load_all(verified_path(pinned).read_text()) if document]
