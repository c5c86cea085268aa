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
        name="a-stamped-revision-keeps-its-claim",
        keeps="no opted-in pod runs without its claim: a leader of a revision upstream recorded stamped, after opt-out",
        path="packages/mnnvl-lws/src/mnnvl_lws/admission.py",
        find="return fresh is not None and revision is not None and await _revision_opted_in(client, stores, fresh, revision)",
        replace="return False",
    ),
    Guard(
        name="a-stamped-revision-keeps-its-domain",
        keeps="a leader of a stamped revision admitted after opt-out gets its domain created and is released",
        path="packages/mnnvl-lws/src/mnnvl_lws/planner.py",
        find="return workload.opted_in or leader.revision in stamped_revisions",
        replace="return workload.opted_in",
    ),
    Guard(
        name="a-stamped-child-keeps-its-claim",
        keeps="no opted-in pod runs without its claim: a pod of a stamped child after its set opted out",
        path="packages/mnnvl-ds/src/mnnvl_ds/admission.py",
        find="(workload.opted_in or child.slice_scope)",
        replace="workload.opted_in",
    ),
    Guard(
        name="a-stamped-child-keeps-its-slice-domain",
        keeps="a stamped child's (slice, revision) gets its domain after its set opted out, until the rollout drains it",
        path="packages/mnnvl-ds/src/mnnvl_ds/planner.py",
        find="                if not workload.deleting:",
        replace="                if workload.opted_in and not workload.deleting:",
    ),
    Guard(
        name="refuse-child-scale-up-while-gate-off",
        keeps="no enrolled slice grows without claims while the gate is off: scale-up of an enrolled role's child",
        path="packages/mnnvl-ds/src/mnnvl_ds/decisions.py",
        find="        if not role_enrolled:",
        replace="        if not creating or not role_enrolled:",
    ),
    Guard(
        name="refuse-enrolled-pods-while-gate-off",
        keeps="no pod of an enrolled role runs without its claim while the gate is off (it is refused for retry)",
        path="packages/mnnvl-ds/src/mnnvl_ds/admission.py",
        find="        await _refuse_while_gate_off(client, namespace, child)\n",
        replace="",
    ),
)
