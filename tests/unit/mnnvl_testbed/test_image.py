"""The image build's pure parts: which bases the Dockerfile names, how a container engine qualifies them, and the
`buildah run` a replica is started with."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from mnnvl_testbed import image

ROOT = pathlib.Path(__file__).parents[3]


@pytest.mark.parametrize(
    ("reference", "qualified"),
    [
        ("python:3.11-slim-bookworm", "docker.io/library/python:3.11-slim-bookworm"),
        ("library/python:3.11", "docker.io/library/python:3.11"),
        ("someone/app:1", "docker.io/someone/app:1"),
        ("ghcr.io/astral-sh/uv:0.13.9", "ghcr.io/astral-sh/uv:0.13.9"),
        ("localhost/mnnvl:dev", "localhost/mnnvl:dev"),
        ("registry:5000/app:1", "registry:5000/app:1"),
    ],
)
def test_short_names_are_qualified_as_a_container_engine_does(reference: str, qualified: str) -> None:
    assert image.qualified(reference) == qualified


def test_the_repositorys_dockerfile_names_the_python_base_and_uvs_image() -> None:
    assert image.base_images((ROOT / "Dockerfile").read_text()) == image.BaseImages(
        python="docker.io/library/python:3.11-slim-bookworm", uv="ghcr.io/astral-sh/uv:0.13.9"
    )


PINNED = (
    f"ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:{'a' * 64}\n"
    f"ARG UV_IMAGE=ghcr.io/astral-sh/uv:1@sha256:{'b' * 64}\n"
    "ARG VERSION=dev\nFROM ${UV_IMAGE} AS uv\nFROM ${PYTHON_IMAGE} AS build\nRUN true\nFROM ${PYTHON_IMAGE}\n"
    "COPY --from=build /opt /opt\n"
)


def test_bases_pinned_by_digest_are_built_from_the_stand_ins_by_tag() -> None:
    assert image.stand_in_arguments(PINNED) == {
        "PYTHON_IMAGE": "python:3.11-slim-bookworm",
        "UV_IMAGE": "ghcr.io/astral-sh/uv:1",
    }
    assert image.base_images(PINNED) == image.BaseImages(
        python="docker.io/library/python:3.11-slim-bookworm", uv="ghcr.io/astral-sh/uv:1"
    )


def test_a_digest_written_in_a_from_line_is_refused_naming_the_way_out() -> None:
    text = PINNED.replace("FROM ${UV_IMAGE} AS uv", f"FROM ghcr.io/astral-sh/uv:1@sha256:{'b' * 64} AS uv")
    with pytest.raises(image.ImageError, match="in a FROM line: pin it in the default of a global ARG"):
        image.base_images(text)


@pytest.mark.parametrize(
    ("head", "modified", "label"),
    [
        ("0123abc", False, "0123abc"),
        ("0123abc", True, "0123abc-dirty"),
        (None, False, "unknown"),
    ],
)
def test_the_revision_label_says_whether_the_tree_is_the_commit(head: str | None, modified: bool, label: str) -> None:
    assert image.revision(head, modified=modified) == label


def test_the_build_labels_the_charts_app_version_and_names_the_stand_ins() -> None:
    arguments = image.build_arguments(ROOT)
    assert arguments["VERSION"] == yaml.safe_load((ROOT / "charts" / "mnnvl" / "Chart.yaml").read_text())["appVersion"]
    assert arguments["PYTHON_IMAGE"] == "python:3.11-slim-bookworm"
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", arguments["REVISION"])


def test_an_argument_overriding_the_python_base_is_followed() -> None:
    text = (
        "ARG PYTHON_IMAGE=python:3.11-slim-trixie\nFROM ghcr.io/astral-sh/uv:1 AS uv\n"
        "FROM ${PYTHON_IMAGE} AS build\nRUN true\nFROM ${PYTHON_IMAGE}\nCOPY --from=build /opt /opt\n"
    )
    assert image.base_images(text) == image.BaseImages(
        python="docker.io/library/python:3.11-slim-trixie", uv="ghcr.io/astral-sh/uv:1"
    )


@pytest.mark.parametrize(
    "text",
    [
        "FROM python:3.11\nRUN true\n",  # no uv
        "FROM ghcr.io/astral-sh/uv:1 AS uv\nFROM python:3.11 AS build\nFROM python:3.12\n",  # two pythons
        "FROM ghcr.io/astral-sh/uv:1 AS uv\nFROM python:3.11 AS build\nFROM debian:12\n",  # a third base
    ],
)
def test_a_dockerfile_on_other_bases_is_refused_naming_them(text: str) -> None:
    with pytest.raises(image.ImageError, match="the Dockerfile's bases are"):
        image.base_images(text)


def test_the_stand_in_recipe_changes_with_what_it_is_made_of(monkeypatch: pytest.MonkeyPatch) -> None:
    before = image.python_stand_in_recipe()
    assert image.python_stand_in_recipe() == before
    monkeypatch.setattr(image, "PYTHON_STAND_IN_PACKAGES", (*image.PYTHON_STAND_IN_PACKAGES, "gcc"))
    assert image.python_stand_in_recipe() != before


def test_a_replica_runs_as_its_pod_would(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv("MNNVL_TESTBED_CACHE", str(tmp_path))
    command = image.run_command(
        "mnnvl-testbed-mnnvl-lws-0",
        ["mnnvl-lws"],
        environment={"B": "2", "A": "1"},
        mounts=[
            image.Mount(source=tmp_path / "account", target=image.SERVICE_ACCOUNT_DIRECTORY),
            image.Mount(source=tmp_path / "config.yaml", target="/etc/mnnvl/config.yaml"),
        ],
        user="65532:65532",
    )
    store = tmp_path / "image"
    assert command == [
        "buildah",
        *("--root", str(store / "storage"), "--runroot", str(store / "run"), "--storage-driver", "vfs"),
        *("run", "--isolation", "chroot", "--network", "host", "--user", "65532:65532", "--cap-drop", "ALL"),
        *("--volume", f"{tmp_path / 'account'}:/var/run/secrets/kubernetes.io/serviceaccount:ro"),
        *("--volume", f"{tmp_path / 'config.yaml'}:/etc/mnnvl/config.yaml:ro"),
        *("--env", "A=1", "--env", "B=2"),
        "mnnvl-testbed-mnnvl-lws-0",
        "--",
        "mnnvl-lws",
    ]


def test_a_replica_whose_pod_sets_no_user_runs_as_the_images_user() -> None:
    command = image.run_command("mnnvl-testbed-mnnvl-lws-0", ["mnnvl-lws"], environment={}, mounts=[], user=None)
    assert "--user" not in command
    assert command[-3:] == ["mnnvl-testbed-mnnvl-lws-0", "--", "mnnvl-lws"]


def test_the_python_stand_in_is_made_for_its_one_base_only() -> None:
    with pytest.raises(
        image.ImageError,
        match=re.escape("the local stand-in is made for docker.io/library/python:3.11-slim-bookworm only"),
    ):
        image.ensure_python_stand_in("docker.io/library/python:3.12-slim-trixie")


def context(root: pathlib.Path) -> pathlib.Path:
    for path, text in {
        "Dockerfile": "FROM x\n",
        ".dockerignore": "*\n",
        "requirements/runtime.txt": "a==1\n",
        "packages/mnnvl-lws/src/mnnvl_lws/__init__.py": "",
        "packages/mnnvl-testbed/src/mnnvl_testbed/__init__.py": "",
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


@pytest.mark.parametrize(
    ("changed", "rebuilds"),
    [
        ("packages/mnnvl-lws/src/mnnvl_lws/__init__.py", True),
        ("packages/mnnvl-lws/src/mnnvl_lws/new.py", True),
        ("requirements/runtime.txt", True),
        ("Dockerfile", True),
        ("packages/mnnvl-testbed/src/mnnvl_testbed/__init__.py", False),  # not in the build context
        ("packages/mnnvl-lws/src/mnnvl_lws/__pycache__/x.pyc", False),
        ("packages/mnnvl-lws/src/mnnvl_lws.egg-info/PKG-INFO", False),
    ],
)
def test_the_build_is_reused_only_while_its_context_is_unchanged(
    tmp_path: pathlib.Path, changed: str, rebuilds: bool
) -> None:
    root = context(tmp_path)
    before = image.context_digest(root, ["recipe"], {"REVISION": "1"})
    (root / changed).parent.mkdir(parents=True, exist_ok=True)
    (root / changed).write_text("changed\n")
    assert (image.context_digest(root, ["recipe"], {"REVISION": "1"}) != before) is rebuilds


def test_a_changed_base_rebuilds(tmp_path: pathlib.Path) -> None:
    root = context(tmp_path)
    assert image.context_digest(root, ["one"], {}) != image.context_digest(root, ["other"], {})


def test_a_changed_build_argument_rebuilds(tmp_path: pathlib.Path) -> None:
    root = context(tmp_path)
    assert image.context_digest(root, [], {"REVISION": "1"}) != image.context_digest(root, [], {"REVISION": "2"})


def test_testbeds_sharing_the_store_name_their_replicas_apart(tmp_path: pathlib.Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert image.replica_container(first, "mnnvl-lws-0") != image.replica_container(second, "mnnvl-lws-0")
    assert image.replica_container(first, "mnnvl-lws-0").startswith(image.container_prefix(first))
    assert not image.replica_container(second, "mnnvl-lws-0").startswith(image.container_prefix(first))


def test_a_mount_target_follows_the_links_of_the_containers_root(tmp_path: pathlib.Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to("/run")  # as in Debian: absolute, meant for the container's root
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "alias").symlink_to("../run")
    assert image.resolved(tmp_path, image.SERVICE_ACCOUNT_DIRECTORY) == "/run/secrets/kubernetes.io/serviceaccount"
    assert image.resolved(tmp_path, "/etc/alias/x/../y") == "/run/y"
    assert image.resolved(tmp_path, "/etc/mnnvl/configuration.yaml") == "/etc/mnnvl/configuration.yaml"


def test_a_loop_of_links_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(image.ImageError, match="too many links"):
        image.resolved(tmp_path, "/a/x")
