"""Every safety guard of the promise, each with the mutation that removes it.

`tox -e guards` applies each mutation to a scratch copy of the repository and requires the property suite
(`tests/unit/safety`) to fail on it; a guard whose removal no property test notices is a finding.

A mutation is an exact text replacement: `find` must occur exactly once in `path` (checked by the unit test
`tests/unit/test_guard_catalogue.py`), so a refactor that moves a guard breaks the catalogue loudly instead of
silently mutating nothing.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class Guard:
    #: Short identifier, kebab-case, unique.
    name: str
    #: Which promise it keeps, in a few words.
    keeps: str
    #: Repository-relative file the guard lives in.
    path: str
    #: Exact text of the guard (occurs exactly once in `path`).
    find: str
    #: The text with the guard removed.
    replace: str


GUARDS: tuple[Guard, ...] = (
    Guard(
        name="guardian-deny-refuses-in-use-deletion",
        keeps="no domain starts deleting while a non-terminal pod references it (Deny mode)",
        path="packages/mnnvl-guardian/src/mnnvl_guardian/admission.py",
        find="            raise kopf.AdmissionError(reason, code=403)",
        replace="            return",
    ),
    Guard(
        name="guardian-deny-fresh-check-before-allowing",
        keeps="a deletion the guardian's stores see no user for is allowed only after a fresh list finds none",
        path="packages/mnnvl-guardian/src/mnnvl_guardian/admission.py",
        find="    if not users:\n        named = await writer.fresh_users(domain)",
        replace="    if False:\n        named = await writer.fresh_users(domain)",
    ),
    Guard(
        name="guardian-deny-refuses-when-unverified",
        keeps="a deletion whose in-use check did not finish in time (or failed) is refused, never allowed unchecked",
        path="packages/mnnvl-guardian/src/mnnvl_guardian/admission.py",
        find="        return planner.unverified(domain, within)",
        replace="        return None",
    ),
)
