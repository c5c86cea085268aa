"""The image's software bill of materials: a CycloneDX 1.5 JSON document listing every distribution the image
installs, read from the same files the install reads (docs/image.md).

The third-party distributions come from the hashed lock `requirements/runtime.txt`, each with the SHA-256 of every
artefact the lock accepts for its version (the install refuses any other, so the one installed is among them); ours
are the packages `requirements/runtime.in` names, by the name and version of their `pyproject.toml`, without hashes
(they are built from the tree). No timestamp and no random serial number, so one tree gives one document.

The Dockerfile's build stage runs it with the image's interpreter, which is why it needs the standard library only:

    python requirements/sbom.py --image-version 0.1.0 > sbom.cdx.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import sys
import tomllib
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPEC_VERSION = "1.5"
IMAGE_NAME = "mnnvl"
#: `name==version` opening a lock entry, before any environment marker or hash.
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)", re.MULTILINE)
HASH = re.compile(r"--hash=sha256:(?P<digest>[0-9a-f]{64})")


class LockError(ValueError):
    """The lock or a package's metadata cannot be described; the message names the entry and the fix."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Distribution:
    name: str
    version: str
    #: The SHA-256 of each artefact the lock accepts for this version; empty for ours, built from the tree.
    sha256: tuple[str, ...] = ()


def canonical(name: str) -> str:
    """A distribution's name as package URLs and indexes compare it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(text: str, *, source: str = "requirements/runtime.txt") -> list[Distribution]:
    """Every pin of the hashed requirements file `text`, with the hashes listed under it."""
    starts = list(PIN.finditer(text))
    ends = [match.start() for match in starts[1:]] + [len(text)]
    pins = []
    for match, end in zip(starts, ends, strict=True):
        hashes = tuple(HASH.findall(text, match.end(), end))
        if not hashes:
            raise LockError(
                f"{source}: {match['name']}=={match['version']} has no sha256 hash: refresh with ./dev lock"
            )
        pins.append(Distribution(name=match["name"], version=match["version"], sha256=hashes))
    return pins


def package_url(distribution: Distribution) -> str:
    return f"pkg:pypi/{canonical(distribution.name)}@{urllib.parse.quote(distribution.version, safe='')}"


def component(distribution: Distribution) -> dict[str, object]:
    found: dict[str, object] = {
        "type": "library",
        "bom-ref": package_url(distribution),
        "name": canonical(distribution.name),
        "version": distribution.version,
        "purl": package_url(distribution),
    }
    if distribution.sha256:
        found["hashes"] = [{"alg": "SHA-256", "content": digest} for digest in distribution.sha256]
    return found


def document(third_party: list[Distribution], ours: list[Distribution], image_version: str) -> dict[str, object]:
    """The CycloneDX document of an image of version `image_version` holding `third_party` and `ours`."""
    names = [canonical(distribution.name) for distribution in [*third_party, *ours]]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise LockError(
            f"{', '.join(repeated)}: listed twice (in the lock and as ours, or twice in one): our packages are "
            "built from the tree and must stay out of the lock (./dev lock leaves them out)"
        )
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "version": 1,
        "metadata": {
            "component": {"type": "container", "bom-ref": IMAGE_NAME, "name": IMAGE_NAME, "version": image_version}
        },
        "components": [
            component(distribution)
            for distribution in sorted([*third_party, *ours], key=lambda distribution: canonical(distribution.name))
        ],
    }


def product_package_directories(runtime_in: str) -> list[str]:
    """The package directories `requirements/runtime.in` lists, as requirements/install reads them."""
    return [line.strip() for line in runtime_in.splitlines() if line.strip() and not line.startswith("#")]


def own_distribution(pyproject: str, *, source: str) -> Distribution:
    project = tomllib.loads(pyproject).get("project", {})
    if not isinstance(project.get("name"), str) or not isinstance(project.get("version"), str):
        raise LockError(f"{source}: [project] needs a static name and version to be listed in the image's SBOM")
    return Distribution(name=project["name"], version=project["version"])


# The imperative part: read the tree, write the document.


def own_distributions(root: pathlib.Path) -> list[Distribution]:
    """Our packages the image ships, as `root`'s `requirements/runtime.in` lists them."""
    return [
        own_distribution((root / directory / "pyproject.toml").read_text(), source=f"{directory}/pyproject.toml")
        for directory in product_package_directories((root / "requirements" / "runtime.in").read_text())
    ]


def read(root: pathlib.Path, image_version: str) -> dict[str, object]:
    third_party = locked((root / "requirements" / "runtime.txt").read_text())
    return document(third_party, own_distributions(root), image_version)


def main(arguments: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--image-version", required=True, help="the image's version (its version label)")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="the repository (default: this one)")
    options = parser.parse_args(arguments)
    try:
        found = read(options.root, options.image_version)
    except LockError as error:
        print(f"sbom: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
