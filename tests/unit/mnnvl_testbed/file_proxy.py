"""A Go module proxy in a directory, as the go command reads one with `GOPROXY=file://<directory>`: for tests of the
download path with modules laid out by the test (no proxy here serves the testbed's upstream modules), or copied
from a module cache the real proxy filled.

Zips laid out here are in no checksum database, so the go commands of these tests run with `GOSUMDB=off`
(`environment`).
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import zipfile
from collections.abc import Mapping

_PSEUDO_VERSION_TIME = re.compile(r"[-.](\d{14})-[0-9a-f]{12}$")


def escaped(module: str) -> str:
    """A module path as proxies and the module cache spell it: each upper-case letter as `!` and its lower case."""
    return re.sub(r"[A-Z]", lambda letter: "!" + letter.group().lower(), module)


def module_files(tree: Mapping[str, bytes]) -> dict[str, bytes]:
    """What a module zip holds of a module's tree (paths relative to its root): no nested module (a directory with a
    go.mod of its own) and no vendored package (but `vendor/modules.txt`)."""
    nested = [path.removesuffix("go.mod") for path in tree if path != "go.mod" and path.endswith("/go.mod")]
    return {
        path: content
        for path, content in tree.items()
        if not any(path.startswith(directory) for directory in nested)
        and (not path.startswith("vendor/") or path == "vendor/modules.txt")
    }


def publish(proxy: pathlib.Path, module: str, version: str, files: Mapping[str, bytes]) -> None:
    """Serve `files` (path inside the module → content, `go.mod` among them) as `module@version`; a pseudo-version
    is dated as its commit."""
    _list(proxy, module, version)
    stamp = _PSEUDO_VERSION_TIME.search(version)
    digits = stamp.group(1) if stamp else "20260101000000"
    time = f"{digits[:4]}-{digits[4:6]}-{digits[6:8]}T{digits[8:10]}:{digits[10:12]}:{digits[12:]}Z"
    _version_file(proxy, module, version, ".info").write_text(json.dumps({"Version": version, "Time": time}))
    _version_file(proxy, module, version, ".mod").write_bytes(files["go.mod"])
    with zipfile.ZipFile(_version_file(proxy, module, version, ".zip"), "w") as archive:
        for path, content in sorted(files.items()):
            archive.writestr(f"{module}@{version}/{path}", content)


def republish(proxy: pathlib.Path, module_cache: pathlib.Path, module: str, version: str) -> None:
    """Serve `module@version` as the go command downloaded it into `module_cache`: its download cache
    (`cache/download`) is laid out as a file proxy already, so the version's .info, .mod and .zip are copied as
    they are (copied, not served in place, so that what a test serves or alters never reaches that cache)."""
    _list(proxy, module, version)
    for suffix in (".info", ".mod", ".zip"):
        shutil.copyfile(
            _version_file(module_cache / "cache" / "download", module, version, suffix),
            _version_file(proxy, module, version, suffix),
        )


def _version_file(root: pathlib.Path, module: str, version: str, suffix: str) -> pathlib.Path:
    """The file of `module@version` ending in `suffix` (.info, .mod, .zip) in a proxy's layout at `root`."""
    return root / escaped(module) / "@v" / f"{escaped(version)}{suffix}"


def _list(proxy: pathlib.Path, module: str, version: str) -> None:
    """Add `version` to the versions `proxy` lists for `module`, creating the module's directory."""
    directory = proxy / escaped(module) / "@v"
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "list").open("a") as listing:
        listing.write(version + "\n")


def environment(proxy: pathlib.Path, module_cache: pathlib.Path) -> dict[str, str]:
    """The go environment that downloads from `proxy` alone into `module_cache`, without checksum database (the
    zips are the test's own) and without private-module settings that would bypass the proxy."""
    return {
        "GOPROXY": proxy.as_uri(),
        "GOMODCACHE": str(module_cache),
        "GOSUMDB": "off",
        "GOPRIVATE": "",
        "GONOPROXY": "",
        "GONOSUMDB": "",
    }
