"""What matters in the Dockerfile, read without a container engine: the last stage only receives the
installed environment and runs as user 65532; nothing picks the controller for the Deployment; the build
installs through requirements/install, from the lock, with the uv these tests use."""

from __future__ import annotations

import fnmatch
import importlib.metadata
import pathlib

import pytest

from mnnvl_testbed import dockerfile

ROOT = pathlib.Path(__file__).parents[2]
VENV = "/opt/mnnvl"
NON_ROOT = "65532:65532"


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


def build_problems(stages: list[dockerfile.Stage], uv_version: str) -> list[str]:
    """Why the build stage does not install the product as requirements/install does (empty: it does)."""
    by_name = {stage.name: stage for stage in stages}
    build = by_name.get(stages[-1].all("COPY")[0].options.get("from")) if stages[-1].all("COPY") else None
    if build is None:
        return ["the runtime stage copies from no build stage"]
    problems = []
    if build.base != stages[-1].base or not build.base.startswith("python:3.11-slim"):
        problems.append(
            f"build and runtime stages must share one python:3.11-slim base: {build.base}, {stages[-1].base}"
        )
    if not any(f"requirements/install {VENV}/bin/python" in run.text for run in build.all("RUN")):
        problems.append(f"the build stage does not run requirements/install into {VENV}")
    uv_images = [stage.base for stage in stages if stage.base.startswith("ghcr.io/astral-sh/uv:")]
    if uv_images != [f"ghcr.io/astral-sh/uv:{uv_version}"]:
        problems.append(f"the image's uv {uv_images} is not the uv the tests install with ({uv_version})")
    return problems


def the_dockerfile() -> list[dockerfile.Stage]:
    return dockerfile.parse((ROOT / "Dockerfile").read_text())


def test_the_runtime_stage_has_only_the_installed_environment_and_runs_as_65532() -> None:
    assert runtime_problems(the_dockerfile()) == []


def test_the_build_stage_installs_from_the_lock_with_the_tested_uv() -> None:
    assert build_problems(the_dockerfile(), importlib.metadata.version("uv")) == []


GOOD = """\
ARG BASE=python:3.11-slim-bookworm
FROM ghcr.io/astral-sh/uv:1.0.0 AS uv
FROM ${BASE} AS build
COPY --from=uv /uv /usr/local/bin/uv
RUN uv venv /opt/mnnvl \\
    && requirements/install /opt/mnnvl/bin/python
FROM ${BASE}
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
        pytest.param(("FROM ${BASE}\nCOPY", "FROM python:3.12-slim\nCOPY"), "share one", id="other-base"),
    ],
)
def test_the_build_checks_catch(change: tuple[str, str], problem: str) -> None:
    assert build_problems(dockerfile.parse(GOOD), "1.0.0") == []
    [found] = build_problems(dockerfile.parse(GOOD.replace(*change)), "1.0.0")
    assert problem in found


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
