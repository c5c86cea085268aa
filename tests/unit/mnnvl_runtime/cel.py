"""A check of the CEL the webhooks' match conditions are built from (`mnnvl_runtime.webhooks`): with
failurePolicy Fail an erroring condition rejects the request, and a field read without has() errors when absent."""

from __future__ import annotations

import re
from collections.abc import Sequence


def unguarded_reads(condition: str, variables: Sequence[str]) -> list[str]:
    """The field reads of `variables` (and of the variables `.exists()` binds) that no earlier has() tests."""
    problems = []
    for match in re.finditer(rf"(?<![\w.\"])({'|'.join(variables)})((?:\.\w+)+)(\(?)", condition):
        variable, fields = match.group(1), match.group(2).lstrip(".").split(".")
        if match.group(3):  # a macro or method call on what precedes it: `.exists(`, not a field
            fields = fields[:-1]
        if condition[: match.start()].endswith("has("):  # has() tests its own last field
            fields = fields[:-1]
        for depth in range(1, len(fields) + 1):
            step = ".".join((variable, *fields[:depth]))
            tested = condition.find(f"has({step})")
            if not 0 <= tested < match.start():
                problems.append(f"{match.group(0)} reads {step} before testing it with has()")
    for bound, body in re.findall(r"\.exists\((\w+), (.*?)\)\)", condition):
        for read in re.findall(rf"(?<!has\(){bound}\.(\w+)\b(?!\()", body):  # fields, not method calls
            if f"has({bound}.{read})" not in body:
                problems.append(f"{bound}.{read} is read without has()")
    return problems
