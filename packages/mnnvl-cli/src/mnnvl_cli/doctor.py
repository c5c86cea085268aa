"""`kubectl mnnvl doctor` (being written)."""

from __future__ import annotations

import enum
from collections.abc import Sequence

from mnnvl_runtime import kube

from . import render


class Outcome(enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


class Check(render.Report):
    name: str
    outcome: Outcome
    finding: str
    fix: str = ""


def run_checks(client: kube.Kube, *, probe_namespace: str) -> list[Check]:
    return []


def as_table(checks: Sequence[Check], style: render.Style) -> str:
    return ""


def exit_code(checks: Sequence[Check]) -> int:
    return 0
