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
        name="fence-timed-per-mark",
        keeps="no domain deleted under a pod: a mark lifted and set again gets a fence of its own",
        path="packages/mnnvl-api/src/mnnvl_api/decisions/fencing.py",
        find=" and previous.mark == mark and ",
        replace=" and ",
    ),
    Guard(
        name="fence-mark-nonce",
        keeps="no domain deleted under a pod: every condemned mark carries a value of its own",
        path="packages/mnnvl-runtime/src/mnnvl_runtime/domains.py",
        find='mark, term = f"{self.component}/{uuid.uuid4().hex}", self.term()',
        replace="mark, term = self.component, self.term()",
    ),
    Guard(
        name="fence-forgotten-on-lease-change",
        keeps="no domain deleted under a pod: a replica leading again trusts no sighting from an earlier term",
        path="packages/mnnvl-api/src/mnnvl_api/decisions/fencing.py",
        find=" and previous.term == term:",
        replace=":",
    ),
    Guard(
        name="fence-counted-to-the-list-start",
        keeps="no domain deleted under a pod: the fence is counted to when the final pod list began",
        path="packages/mnnvl-runtime/src/mnnvl_runtime/domains.py",
        find="            now=checked_at,\n            fence_seconds=self.fence_seconds,\n",
        replace="            now=self.clock(),\n            fence_seconds=self.fence_seconds,\n",
    ),
    Guard(
        name="fence-minimum-in-the-loader",
        keeps="no domain deleted under a pod: a fence shorter than the API server's request timeout is refused",
        path="packages/mnnvl-api/src/mnnvl_api/models/configuration.py",
        find="        elif self.deletion_fence_seconds < minimum:\n",
        replace="        elif self.deletion_fence_seconds < 0:\n",
    ),
)
