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
        name="newest-prefers-newest",
        keeps="a stale store entry (deletion hidden by a relist) never shadows its same-named successor",
        path="packages/mnnvl-runtime/src/mnnvl_runtime/indexes.py",
        find="newest = max(found, key=lambda obj: self._versions.get(obj, UNVERSIONED))",
        replace="newest = next(iter(found))",
    ),
    Guard(
        name="ds-no-claim-only-on-fresh-reads",
        keeps="a slice pod is admitted without claim and gate only when the API, read afresh, says so",
        path="packages/mnnvl-ds/src/mnnvl_ds/admission.py",
        find="        if workload is not None:\n            return stored, workload\n",
        replace="        return (stored, workload) if workload is not None else None\n",
    ),
    Guard(
        name="ds-read-afresh-on-mismatch",
        keeps="the stores answer for a slice pod only when they hold the child and set the pod belongs to",
        path="packages/mnnvl-ds/src/mnnvl_ds/admission.py",
        find="if stored is not None and agreed and stored.slice_scope:",
        replace="if stored is not None and stored.slice_scope:",
    ),
    Guard(
        name="lws-read-afresh-on-mismatch",
        keeps="a replica pod is bound against the LeaderWorkerSet that exists, not a previous one the stores hold",
        path="packages/mnnvl-lws/src/mnnvl_lws/admission.py",
        find="if domain is None or (known is not None and known.uid == domain.owner_uid):",
        replace="if True:",
    ),
    Guard(
        name="worker-derived-domain",
        keeps="one group, one domain: a leader's edited record cannot steer its worker onto another domain",
        path="packages/mnnvl-lws/src/mnnvl_lws/decisions.py",
        find="    return leader_domain(leader, position)\n",
        replace="    return references.recorded_domain(leader)\n",
    ),
    Guard(
        name="worker-leader-uid",
        keeps="one group, one domain: a worker binds to the current incarnation of its leader only",
        path="packages/mnnvl-lws/src/mnnvl_lws/decisions.py",
        find='if leader_ref is not None and leader_ref.get("uid") != leader_meta.get("uid"):',
        replace="if False:",
    ),
    Guard(
        name="field-manager-impersonation-refused",
        keeps="nothing foreign passes for ours: only a controller itself writes as its field manager",
        path="packages/mnnvl-api/src/mnnvl_api/decisions/field_managers.py",
        find="if requester == own_user or not wrote_as(manager, meta, old_meta):",
        replace="if True:",
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
