"""Output: aligned tables that fit the terminal, colours only on a terminal, ages, JSON and YAML."""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Sequence
from typing import Any, Final

import pydantic
import yaml
from pydantic import alias_generators

#: Tables are cut to this width: the issue's promise (and what a laptop terminal shows without wrapping).
WIDTH: Final = 120
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOURS: Final = {"green": "32", "red": "31", "yellow": "33", "bold": "1", "dim": "2"}


class Report(pydantic.BaseModel):
    """The base of every command's result: camelCase in JSON and YAML, as Kubernetes tools write."""

    model_config = pydantic.ConfigDict(alias_generator=alias_generators.to_camel, populate_by_name=True, frozen=True)


@dataclasses.dataclass(frozen=True)
class Style:
    """Colours when writing to a terminal, plain text otherwise."""

    colour: bool = False

    def paint(self, text: str, colour: str) -> str:
        return f"\x1b[{COLOURS[colour]}m{text}\x1b[0m" if self.colour and text else text


def visible_length(text: str) -> int:
    return len(_ANSI.sub("", text))


def table(rows: Sequence[Sequence[str]], *, indent: int = 0, width: int = WIDTH) -> list[str]:
    """Rows (the first is the header) as aligned columns; the last column is cut so a line fits `width`."""
    if not rows:
        return []
    columns = len(rows[0])
    widths = [max(visible_length(row[i]) for row in rows) for i in range(columns)]
    lines = []
    for row in rows:
        cells = [cell + " " * (widths[i] - visible_length(cell)) for i, cell in enumerate(row[:-1])]
        line = " " * indent + "  ".join([*cells, row[-1]])
        lines.append(fit(line.rstrip(), width))
    return lines


def fit(line: str, width: int = WIDTH) -> str:
    """The line, cut with an ellipsis when it is wider than `width` (the full facts are in `-o json`)."""
    if visible_length(line) <= width:
        return line
    if _ANSI.search(line):  # cut the plain text; colours of a cut line are dropped rather than left open
        line = _ANSI.sub("", line)
    return line[: width - 1] + "…"


def short_clique(clique: str | None) -> str:
    """A clique label (`<cluster UUID>.<clique id>`) short enough for a table column: the UUID's first block and
    the clique id; JSON and YAML keep it whole."""
    if not clique:
        return "-"
    cluster, dot, clique_id = clique.rpartition(".")
    return f"{cluster.split('-')[0]}….{clique_id}" if dot and len(clique) > 16 else clique


def timestamp(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def age(value: str | None, now: datetime.datetime) -> str:
    """`kubectl`'s short age (`45s`, `12m`, `3h`, `2d`) of an RFC 3339 time; `-` when there is none."""
    moment = timestamp(value)
    if moment is None:
        return "-"
    seconds = max(int((now - moment).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def as_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False)


def as_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=WIDTH)
