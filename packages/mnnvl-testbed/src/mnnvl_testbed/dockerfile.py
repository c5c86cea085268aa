"""A reader of Dockerfiles, enough for the image checks (tests/image) and for naming the base images the image
build stands in for (`image.py`): stages, instructions, ARG defaults.

It follows the Dockerfile reference where those checks need it (line continuations, comments, `# syntax`
directives, JSON and shell forms, `--flag=value` options, `${ARG}` in FROM); it is not a full parser.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Mapping

ARG_REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Instruction:
    keyword: str  # upper case: RUN, COPY, ...
    options: dict[str, str]  # --from=build → {"from": "build"}
    arguments: tuple[str, ...]  # JSON form as written; shell form split as a shell would
    json_form: bool
    text: str  # the arguments as written, continuations joined


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stage:
    name: str | None
    base: str  # with global ARG defaults substituted
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def logical_lines(text: str) -> list[str]:
    """Lines with continuations joined and comments (including parser directives) dropped."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def instruction(line: str) -> Instruction:
    keyword, _, rest = line.partition(" ")
    rest = rest.strip()
    options: dict[str, str] = {}
    while rest.startswith("--"):
        option, _, rest = rest.partition(" ")
        name, _, value = option[2:].partition("=")
        options[name] = value
        rest = rest.strip()
    if rest.startswith("["):
        arguments = tuple(json.loads(rest))
        return Instruction(keyword=keyword.upper(), options=options, arguments=arguments, json_form=True, text=rest)
    return Instruction(
        keyword=keyword.upper(), options=options, arguments=tuple(shlex.split(rest)), json_form=False, text=rest
    )


def global_arguments(text: str) -> dict[str, str]:
    """The ARGs declared before the first FROM, with their defaults ("" for none): the only ones FROM lines see."""
    defaults: dict[str, str] = {}
    for line in logical_lines(text):
        parsed = instruction(line)
        if parsed.keyword == "FROM":
            break
        if parsed.keyword == "ARG":
            name, _, value = parsed.arguments[0].partition("=")
            defaults[name] = value
    return defaults


def parse(text: str, arguments: Mapping[str, str] | None = None) -> list[Stage]:
    """The stages in order; ARGs declared before the first FROM are substituted into FROM lines, with `arguments`
    in place of their defaults (as `--build-arg` gives them)."""
    values = {**global_arguments(text), **(arguments or {})}
    stages: list[Stage] = []
    current: tuple[str | None, str, list[Instruction]] | None = None
    for line in logical_lines(text):
        parsed = instruction(line)
        if parsed.keyword == "FROM":
            if current is not None:
                stages.append(Stage(name=current[0], base=current[1], instructions=tuple(current[2])))
            words = parsed.arguments
            base = ARG_REFERENCE.sub(lambda m: values.get(m["name"] or m["bare"], ""), words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            current = (name, base, [])
        elif current is not None:
            current[2].append(parsed)
    if current is not None:
        stages.append(Stage(name=current[0], base=current[1], instructions=tuple(current[2])))
    return stages
