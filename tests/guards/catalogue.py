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
        name="topology-identity-field-manager",
        keeps="nothing foreign written: a Topology or binding labelled ours is ours only if our field manager wrote it",
        path="packages/mnnvl-topology/src/mnnvl_topology/planner.py",
        find=(
            "    if domains.identity_owner(meta, labels=(keys.MANAGED_BY_LABEL,), annotations=identity) "
            "!= keys.TOPOLOGY_CONTROLLER:"
        ),
        replace="    if False:",
    ),
    Guard(
        name="topology-identity-installation",
        keeps="nothing foreign written: another installation's Topologies and bindings are never ours",
        path="packages/mnnvl-topology/src/mnnvl_topology/planner.py",
        find="    return Provenance.OURS if recorded == installation else Provenance.OTHER_INSTALLATION",
        replace="    return Provenance.OURS",
    ),
    Guard(
        name="topology-identity-annotation-writer",
        keeps="nothing foreign written: an installation annotation written by someone else makes nothing ours",
        path="packages/mnnvl-topology/src/mnnvl_topology/planner.py",
        find="annotations=identity) != keys.TOPOLOGY_CONTROLLER",
        replace="annotations=()) != keys.TOPOLOGY_CONTROLLER",
    ),
    Guard(
        name="topology-never-delete-legacy",
        keeps="nothing foreign written: an earlier version's unconfigured object (maybe another installation's) stays",
        path="packages/mnnvl-topology/src/mnnvl_topology/planner.py",
        find="    return name not in set(wanted) and provenance(found, installation=installation) is Provenance.OURS",
        replace="    return name not in set(wanted) and _may_write(found, installation=installation)",
    ),
    Guard(
        name="topology-foreign-topology-untouched",
        keeps="nothing foreign written: a same-named Topology not ours is neither patched, adopted nor recreated",
        path="packages/mnnvl-topology/src/mnnvl_topology/planner.py",
        find=(
            "        return Action.CREATE\n    if not _may_write(found, installation=installation):\n"
            "        return Action.FOREIGN\n    wanted, present"
        ),
        replace="        return Action.CREATE\n    wanted, present",
    ),
    Guard(
        name="topology-foreign-binding-untouched",
        keeps="nothing foreign written: a same-named ClusterTopologyBinding not ours is neither patched nor adopted",
        path="packages/mnnvl-topology/src/mnnvl_topology/planner.py",
        find="    if not _may_write(found, installation=installation):\n        return Action.FOREIGN\n    spec, present",
        replace="    spec, present",
    ),
    Guard(
        name="topology-write-as-read",
        keeps="nothing foreign written: an apply over a Topology or binding fails if it changed hands since the read",
        path="packages/mnnvl-topology/src/mnnvl_topology/planner.py",
        find='    meta = {**desired["metadata"], "resourceVersion": found["metadata"]["resourceVersion"]}',
        replace='    meta = {**desired["metadata"]}',
    ),
    Guard(
        name="topology-delete-as-read",
        keeps="nothing foreign written: a delete fails if the object changed hands since the read",
        path="packages/mnnvl-topology/src/mnnvl_topology/executor.py",
        find='return await self.client.adelete(path, uid=meta["uid"], resource_version=meta["resourceVersion"])',
        replace='return await self.client.adelete(path, uid=meta["uid"])',
    ),
)
