"""What matters in the Dockerfile, read without a container engine: the last stage only receives the
installed environment and runs as user 65532; nothing picks the controller for the Deployment; the build
installs through requirements/install, from the lock, with the uv these tests use, and writes the bill of
materials; the image is labelled with where it comes from; its bases are pinned by digest."""

from __future__ import annotations

import fnmatch
import importlib.metadata
import pathlib
import re

import pytest

from mnnvl_testbed import dockerfile

ROOT = pathlib.Path(__file__).parents[2]
VENV = "/opt/mnnvl"
NON_ROOT = "65532:65532"
SOURCE = "https://github.com/mnnvl/mnnvl"
SBOM = f"{VENV}/sbom.cdx.json"
#: The OCI labels a release sets from its build arguments (docs/release.md), and the one naming the SBOM.
ARGUMENT_LABELS = {"org.opencontainers.image.version": "VERSION", "org.opencontainers.image.revision": "REVISION"}
SBOM_LABEL = "dev.mnnvl.sbom"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
#: The bases not pinned by digest, exactly, each named in docs/image.md with the reason: no digest of uv's 0.13.9
#: image could be looked up here. Pinning it means removing it here.
NOT_PINNED = {"ghcr.io/astral-sh/uv:0.13.9"}


def runtime_problems(stages: list[dockerfile.Stage]) -> list[str]:
    """Why the last stage is not a runtime stage as docs/image.md promises (empty: it is)."""
    final = stages[-1]
    names = {stage.name for stage in stages[:-1]}
    problems = []
    if final.all("RUN") or final.all("ADD"):
        problems.append("the runtime stage runs or adds something: build tools would have to be in it")
    for copy in final.all("COPY"):
        if copy.options.get("from") not in names or copy.arguments[:-1] != (VENV,):
            problems.append(f"the runtime stage copies something other than {VENV} from a build stage: {copy.text}")
    users = final.all("USER")
    if [user.text for user in users[-1:]] != [NON_ROOT]:
        problems.append(f"the runtime stage does not end as user {NON_ROOT}: {[user.text for user in users]}")
    if any(stage.all("ENTRYPOINT") for stage in stages):
        problems.append("an ENTRYPOINT would hide which controller runs")
    if [(cmd.json_form, cmd.arguments) for cmd in final.all("CMD")] != [(True, ())]:
        problems.append("the runtime stage must clear the base image's CMD with `CMD []`")
    environment = " ".join(env.text for env in final.all("ENV"))
    if "PYTHONDONTWRITEBYTECODE=1" not in environment.split():
        problems.append("Python would write bytecode beside the code, which a read-only root filesystem refuses")
    return problems


def build_stage(stages: list[dockerfile.Stage]) -> dockerfile.Stage | None:
    """The stage the runtime stage copies the environment from."""
    by_name = {stage.name: stage for stage in stages}
    return by_name.get(stages[-1].all("COPY")[0].options.get("from")) if stages[-1].all("COPY") else None


def build_problems(stages: list[dockerfile.Stage], uv_version: str) -> list[str]:
    """Why the build stage does not install the product as requirements/install does (empty: it does)."""
    build = build_stage(stages)
    if build is None:
        return ["the runtime stage copies from no build stage"]
    problems = []
    if build.base != stages[-1].base or not build.base.startswith("python:3.11-slim"):
        problems.append(
            f"build and runtime stages must share one python:3.11-slim base: {build.base}, {stages[-1].base}"
        )
    if not any(f"requirements/install {VENV}/bin/python" in run.text for run in build.all("RUN")):
        problems.append(f"the build stage does not run requirements/install into {VENV}")
    uv_images = [stage.base.split("@")[0] for stage in stages if stage.base.startswith("ghcr.io/astral-sh/uv:")]
    if uv_images != [f"ghcr.io/astral-sh/uv:{uv_version}"]:
        problems.append(f"the image's uv {uv_images} is not the uv the tests install with ({uv_version})")
    return problems


def labels(stage: dockerfile.Stage) -> dict[str, str]:
    pairs = [argument.partition("=") for label in stage.all("LABEL") for argument in label.arguments]
    return {name: value for name, _, value in pairs}


def declared(stage: dockerfile.Stage) -> set[str]:
    return {argument.text.partition("=")[0] for argument in stage.all("ARG")}


def label_problems(stages: list[dockerfile.Stage]) -> list[str]:
    """Why the image would not say where it comes from (empty: it would)."""
    final = stages[-1]
    found = labels(final)
    problems = []
    if found.get("org.opencontainers.image.source") != SOURCE:
        problems.append(
            f"org.opencontainers.image.source must be {SOURCE}: {found.get('org.opencontainers.image.source')}"
        )
    for name, argument in ARGUMENT_LABELS.items():
        if found.get(name) != f"${{{argument}}}" or argument not in declared(final):
            problems.append(f"{name} must be ${{{argument}}}, with ARG {argument} declared in the runtime stage")
    if "org.opencontainers.image.created" in found:
        problems.append("org.opencontainers.image.created would make every build of one commit a different image")
    return problems


def sbom_problems(stages: list[dockerfile.Stage]) -> list[str]:
    """Why the image would not carry its bill of materials where its label says (empty: it would)."""
    build = build_stage(stages)
    runs = [run.text.replace("> ", ">") for run in build.all("RUN")] if build else []
    problems = []
    if not any(
        "requirements/sbom.py" in run and '--image-version "$VERSION"' in run and f">{SBOM}" in run for run in runs
    ):
        problems.append(f"the build stage does not write requirements/sbom.py's document for $VERSION to {SBOM}")
    if build is not None and "VERSION" not in declared(build):
        problems.append("the build stage does not declare ARG VERSION: the SBOM would name no version")
    if labels(stages[-1]).get(SBOM_LABEL) != SBOM:
        problems.append(f"the label {SBOM_LABEL} must name {SBOM}")
    return problems


def pin_problems(stages: list[dockerfile.Stage], not_pinned: set[str]) -> list[str]:
    """Which bases are not pinned by digest, beyond `not_pinned`, and which of `not_pinned` are pinned by now."""
    names = {stage.name for stage in stages}
    unpinned = {stage.base for stage in stages if stage.base not in names and not DIGEST.search(stage.base)}
    return [f"{base} is not pinned by digest (docs/image.md says how)" for base in sorted(unpinned - not_pinned)] + [
        f"{base} is pinned now or gone: drop it from the bases documented as not pinned"
        for base in sorted(not_pinned - unpinned)
    ]


def the_dockerfile() -> list[dockerfile.Stage]:
    return dockerfile.parse((ROOT / "Dockerfile").read_text())


def test_the_runtime_stage_has_only_the_installed_environment_and_runs_as_65532() -> None:
    assert runtime_problems(the_dockerfile()) == []


def test_the_build_stage_installs_from_the_lock_with_the_tested_uv() -> None:
    assert build_problems(the_dockerfile(), importlib.metadata.version("uv")) == []


def test_the_image_is_labelled_with_its_source_version_and_revision() -> None:
    assert label_problems(the_dockerfile()) == []


def test_the_image_carries_its_bill_of_materials_where_its_label_says() -> None:
    assert sbom_problems(the_dockerfile()) == []


def test_every_base_is_pinned_by_digest_but_the_documented_exception() -> None:
    assert pin_problems(the_dockerfile(), NOT_PINNED) == []
    documented = (ROOT / "docs" / "image.md").read_text()
    assert all(f"`{base}`" in documented for base in NOT_PINNED)


GOOD = f"""\
ARG BASE=python:3.11-slim-bookworm@sha256:{"a" * 64}
ARG UV=ghcr.io/astral-sh/uv:1.0.0@sha256:{"b" * 64}
ARG VERSION=dev
ARG REVISION=unknown
FROM ${{UV}} AS uv
FROM ${{BASE}} AS build
COPY --from=uv /uv /usr/local/bin/uv
RUN uv venv /opt/mnnvl \\
    && requirements/install /opt/mnnvl/bin/python
ARG VERSION
RUN /opt/mnnvl/bin/python requirements/sbom.py --image-version "$VERSION" > /opt/mnnvl/sbom.cdx.json
FROM ${{BASE}}
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.source="https://github.com/mnnvl/mnnvl" \\
      org.opencontainers.image.version="${{VERSION}}" \\
      org.opencontainers.image.revision="${{REVISION}}" \\
      dev.mnnvl.sbom=/opt/mnnvl/sbom.cdx.json
COPY --from=build /opt/mnnvl /opt/mnnvl
ENV PATH=/opt/mnnvl/bin:$PATH \\
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
CMD []
"""


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(("USER 65532:65532", "USER root"), "does not end as user", id="root-user"),
        pytest.param(("USER 65532:65532", "USER nonroot"), "does not end as user", id="named-user"),
        pytest.param(("CMD []", 'ENTRYPOINT ["mnnvl-lws"]\nCMD []'), "ENTRYPOINT", id="entrypoint"),
        pytest.param(("CMD []\n", ""), "CMD []", id="base-cmd-kept"),
        pytest.param(("USER 65532", "RUN apt-get install -y gcc\nUSER 65532"), "runs or adds", id="run-in-runtime"),
        pytest.param(("COPY --from=build /opt/mnnvl", "COPY --from=uv /uv"), "other than", id="tool-copied"),
        pytest.param((" \\\n    PYTHONDONTWRITEBYTECODE=1", ""), "bytecode", id="bytecode-written"),
    ],
)
def test_the_runtime_checks_catch(change: tuple[str, str], problem: str) -> None:
    assert runtime_problems(dockerfile.parse(GOOD)) == []
    [found] = runtime_problems(dockerfile.parse(GOOD.replace(*change)))
    assert problem in found


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(("&& requirements/install", "&& pip install"), "does not run requirements/install", id="no-lock"),
        pytest.param(("uv:1.0.0", "uv:0.9.0"), "is not the uv", id="other-uv"),
        pytest.param(
            ("FROM ${BASE}\nARG VERSION\nARG", "FROM python:3.12-slim\nARG VERSION\nARG"), "share one", id="other-base"
        ),
    ],
)
def test_the_build_checks_catch(change: tuple[str, str], problem: str) -> None:
    assert build_problems(dockerfile.parse(GOOD), "1.0.0") == []
    [found] = build_problems(dockerfile.parse(GOOD.replace(*change)), "1.0.0")
    assert problem in found


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(("github.com/mnnvl/mnnvl", "example.com/fork"), "source must be", id="other-source"),
        pytest.param(('version="${VERSION}"', 'version="0.1.0"'), "version must be ${VERSION}", id="fixed-version"),
        pytest.param(("ARG VERSION\nARG REVISION\nLABEL", "ARG VERSION\nLABEL"), "revision must be", id="undeclared"),
        pytest.param(("LABEL ", "LABEL org.opencontainers.image.created=now "), "created", id="created"),
    ],
)
def test_the_label_checks_catch(change: tuple[str, str], problem: str) -> None:
    assert label_problems(dockerfile.parse(GOOD)) == []
    [found] = label_problems(dockerfile.parse(GOOD.replace(*change)))
    assert problem in found


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(("> /opt/mnnvl/sbom.cdx.json", "> /tmp/sbom.json"), "does not write", id="outside-the-venv"),
        pytest.param(('"$VERSION" >', "dev >"), "does not write", id="no-version"),
        pytest.param(("python\nARG VERSION\nRUN", "python\nRUN"), "declare ARG VERSION", id="undeclared"),
        pytest.param(("dev.mnnvl.sbom=/opt/mnnvl/", "dev.mnnvl.sbom=/"), "must name", id="label-elsewhere"),
    ],
)
def test_the_sbom_checks_catch(change: tuple[str, str], problem: str) -> None:
    assert sbom_problems(dockerfile.parse(GOOD)) == []
    [found] = sbom_problems(dockerfile.parse(GOOD.replace(*change)))
    assert problem in found


@pytest.mark.parametrize(
    ("change", "exceptions", "problem"),
    [
        pytest.param((f"@sha256:{'a' * 64}", ""), set(), "python:3.11-slim-bookworm is not pinned", id="tag-only"),
        pytest.param((f"@sha256:{'b' * 64}", "@sha256:abc"), set(), "uv:1.0.0@sha256:abc is not pinned", id="short"),
        pytest.param(("", ""), {"ghcr.io/astral-sh/uv:1.0.0"}, "pinned now or gone", id="stale-exception"),
    ],
)
def test_the_pin_checks_catch(change: tuple[str, str], exceptions: set[str], problem: str) -> None:
    assert pin_problems(dockerfile.parse(GOOD), set()) == []
    [found] = pin_problems(dockerfile.parse(GOOD.replace(*change)), exceptions)
    assert problem in found


def test_a_documented_exception_lets_a_base_go_unpinned() -> None:
    unpinned = GOOD.replace(f"@sha256:{'b' * 64}", "")
    assert pin_problems(dockerfile.parse(unpinned), {"ghcr.io/astral-sh/uv:1.0.0"}) == []


def in_build_context(path: str) -> bool:
    """Whether .dockerignore lets `path` into the build context: the last matching pattern wins, `!` re-includes,
    and a pattern that matches a directory matches everything under it."""
    included = True
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/").replace("**/", "*")
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
            included = negated
    return included


@pytest.mark.parametrize(
    ("path", "included"),
    [
        ("requirements/runtime.txt", True),
        ("requirements/install", True),
        ("packages/mnnvl-runtime/src/mnnvl_runtime/operator.py", True),
        ("packages/mnnvl-testbed/src/mnnvl_testbed/cluster.py", False),
        ("packages/mnnvl-lws/src/mnnvl_lws/__pycache__/scope.cpython-311.pyc", False),
        ("tests/unit/test_lock.py", False),
        (".tox/unit/bin/python", False),
        (".git/HEAD", False),
    ],
)
def test_the_build_context_holds_only_what_the_image_installs(path: str, included: bool) -> None:
    assert in_build_context(path) is included
