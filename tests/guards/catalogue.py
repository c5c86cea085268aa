"""Every safety guard of the promise, each with the mutation that removes it.

`tox -e guards` applies each mutation to a scratch copy of the repository and requires the property suite
(`tests/unit/safety`) to fail on it; a guard whose removal no property test notices is a finding.

A mutation is an exact text replacement: `find` must occur exactly once in `path` (checked by the unit test
`tests/unit/test_guard_catalogue.py`), so a refactor that moves a guard breaks the catalogue loudly instead of
silently mutating nothing.
"""

from __future__ import annotations

import dataclasses

#: The property suite whose failure proves a guard matters.
PROPERTY_SUITE = "tests/unit/safety"


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
    #: The property tests (paths under the repository, files or pytest node ids) that must catch the removal: the
    #: whole property suite unless a narrower model is named, so that a guard run costs only the models that
    #: exercise the guard.
    suite: tuple[str, ...] = (PROPERTY_SUITE,)


RUNTIME = "packages/mnnvl-runtime/src/mnnvl_runtime"
DECISIONS = "packages/mnnvl-api/src/mnnvl_api/decisions"
LWS = "packages/mnnvl-lws/src/mnnvl_lws"
DS = "packages/mnnvl-ds/src/mnnvl_ds"
GUARDIAN = "packages/mnnvl-guardian/src/mnnvl_guardian"
#: The model of the Lease, the work queue and the cache-sync barrier (the scope models stand in for all three).
LEASE_MODEL = f"{PROPERTY_SUITE}/test_lease_interleavings.py"
#: The models run with a replica of the upgrade baseline's code beside one of the current code. They judge a
#: contract between versions, not the current code's guards, so they run in `unit` and not in the guard runs
#: (where they would run once per guard).
MIXED_VERSIONS = f"{PROPERTY_SUITE}/test_mixed_versions.py"
#: The model of the watch stores and their indexes, which reaches what the scope models seldom do.
STORE_MODEL = f"{PROPERTY_SUITE}/test_store_interleavings.py"
#: The model of mnnvl-guardian: its stores, planner, executor and Deny webhook.
GUARDIAN_MODEL = f"{PROPERTY_SUITE}/test_guardian_interleavings.py"
#: The scope models (mnnvl-lws, mnnvl-ds): each file holds the whole model and its campaigns (`harness.campaign`).
REPLICA_MODEL = f"{PROPERTY_SUITE}/test_interleavings.py"
SLICE_MODEL = f"{PROPERTY_SUITE}/test_slice_interleavings.py"
#: The planners' properties over arbitrary snapshots: what each promises whatever its stores say.
REPLICA_PLANNER = f"{PROPERTY_SUITE}/test_replica_planner.py"
SLICE_PLANNER = f"{PROPERTY_SUITE}/test_slice_planner.py"
#: The shared domain writer asked to act on stale plans while the domain and its pods change under it.
WRITER_MODEL = f"{PROPERTY_SUITE}/test_writer_interleavings.py"
#: The replica scope's pod webhook over arbitrary worlds.
REPLICA_ADMISSION = f"{PROPERTY_SUITE}/test_replica_admission.py"
#: The slice scope's pod and child webhooks over arbitrary worlds.
SLICE_ADMISSION = f"{PROPERTY_SUITE}/test_slice_admission.py"
#: ComputeDomain writes naming any field manager, through the API server and the identity webhook.
IDENTITY_WRITES = f"{PROPERTY_SUITE}/test_domain_identity_writes.py"
#: What each layer of mnnvl-guardian (planner, stores) promises on its own.
GUARDIAN_CONTRACTS = f"{PROPERTY_SUITE}/test_guardian_contracts.py"
#: The fenced deletion's decisions over any history of one domain's name.
FENCE_PROTOCOL = f"{PROPERTY_SUITE}/test_fence_protocol.py"
#: Two installations of mnnvl-topology side by side.
TOPOLOGY_MODEL = f"{PROPERTY_SUITE}/test_topology_identity.py"
#: A leader stepping down while its passes' writes are on their way in worker threads.
WRITE_PERMIT_MODEL = f"{PROPERTY_SUITE}/test_write_permit_interleavings.py"


def replica(test: str) -> str:
    """One property test of the replica scope's model (its whole model, or a campaign)."""
    return f"{REPLICA_MODEL}::test_replica_scope_{test}"


def slice_scope(test: str) -> str:
    """One property test of the slice scope's model (its whole model, or a campaign)."""
    return f"{SLICE_MODEL}::test_slice_scope_{test}"


GUARDS: tuple[Guard, ...] = (
    # --- mnnvl_runtime/domain_writer.py: the shared domain writer ------------------------------------------------
    Guard(
        name="writer-writes-only-while-leading",
        keeps="no write from a replica whose Lease may have passed to another",
        path=f"{RUNTIME}/domain_writer.py",
        find="        if not self.may_write():\n            raise NotLeadingError(",
        replace="        if False:\n            raise NotLeadingError(",
        suite=(replica("late_writes"),),
    ),
    # The read's own uid comparison (`meta.get("uid") != uid` in `ungate.change`) only skips a successor quietly:
    # the patch carries the uid test the API server checks when it lands, so removing the comparison changes
    # nothing the API server lets happen (a same-named successor fails the test). The test is the guard.
    Guard(
        name="ungate-modify-tests-the-uid",
        keeps="a gate is lifted only from the pod incarnation the plan saw, not a same-named successor",
        path=f"{RUNTIME}/domain_writer.py",
        find="            return [uid_test, *removal] if removal else None",
        replace="            return removal or None",
        suite=(WRITER_MODEL,),
    ),
    Guard(
        name="ungate-patch-tests-the-uid",
        keeps="the one-patch gate removal fails on a same-named successor pod",
        path=f"{RUNTIME}/domain_writer.py",
        find="                    patch = [uid_test, *injection.gate_removal_at(gate_at)]",
        replace="                    patch = injection.gate_removal_at(gate_at)",
        suite=(WRITER_MODEL,),
    ),
    Guard(
        name="fenced-delete-checks-identity",
        keeps="only domains that are ours by identity are condemned or deleted",
        path=f"{RUNTIME}/domain_writer.py",
        find="        if fresh is None or fresh[1].deleting or not belongs(fresh[1]):",
        replace="        if fresh is None or fresh[1].deleting:",
        suite=(WRITER_MODEL,),
    ),
    Guard(
        name="fenced-delete-lists-pods-afresh",
        keeps="no domain is condemned or deleted while a pod the stores do not know yet uses it",
        path=f"{RUNTIME}/domain_writer.py",
        find="        users = await self.fresh_users(domain)\n        seen_at = None",
        replace="        users: list[str] = []\n        seen_at = None",
        suite=(WRITER_MODEL,),
    ),
    Guard(
        name="delete-preconditioned-on-uid-and-version",
        keeps="the DELETE lands only on the domain version that carried the mark and was found unused",
        path=f"{RUNTIME}/domain_writer.py",
        find="return await self.client.adelete(path, uid=domain.uid, resource_version=domain.resource_version)",
        replace="return await self.client.adelete(path)",
        suite=(f"{WRITER_MODEL}::test_writer_fence_races",),
    ),
    Guard(
        name="mark-preconditioned-on-uid-and-version",
        keeps="a condemned mark is set or lifted only on the domain version that was checked",
        path=f"{RUNTIME}/domain_writer.py",
        find="domain_path(domain.namespace, domain.name), precondition + marks, content_type=kube.JSON_PATCH",
        replace="domain_path(domain.namespace, domain.name), marks, content_type=kube.JSON_PATCH",
        suite=(WRITER_MODEL,),
    ),
    Guard(
        name="uncondemn-checks-identity",
        keeps="a mark is lifted only from a domain that is ours by identity",
        path=f"{RUNTIME}/domain_writer.py",
        find="        if fresh is None or not fresh[1].condemned or not belongs(fresh[1]):",
        replace="        if fresh is None or not fresh[1].condemned:",
        suite=(WRITER_MODEL,),
    ),
    Guard(
        name="release-only-from-a-deleting-domain",
        keeps="the finalizer is released only from a domain being deleted, never a same-named live successor",
        path=f"{RUNTIME}/domain_writer.py",
        find="        if not domain.deleting or not domain.protected or not belongs(domain):",
        replace="        if not domain.protected or not belongs(domain):",
        suite=(WRITER_MODEL,),
    ),
    Guard(
        name="release-checks-identity",
        keeps="the finalizer is released only from a domain that is ours by identity",
        path=f"{RUNTIME}/domain_writer.py",
        find="        if not domain.deleting or not domain.protected or not belongs(domain):",
        replace="        if not domain.deleting or not domain.protected:",
        suite=(WRITER_MODEL,),
    ),
    Guard(
        name="release-lists-pods-afresh",
        keeps="the finalizer stays while a pod the stores do not know yet uses the domain",
        path=f"{RUNTIME}/domain_writer.py",
        find="        users = await self.fresh_users(domain)\n        if users:",
        replace="        users: list[str] = []\n        if users:",
        suite=(WRITER_MODEL,),
    ),
    Guard(
        name="release-preconditioned-on-uid-and-version",
        keeps="the finalizer is removed only from the domain version found unused",
        path=f"{RUNTIME}/domain_writer.py",
        find=(
            "        patch = [\n"
            '            {"op": "test", "path": "/metadata/uid", "value": domain.uid},\n'
            '            {"op": "test", "path": "/metadata/resourceVersion", "value": domain.resource_version},\n'
        ),
        replace="        patch = [\n",
        suite=(f"{WRITER_MODEL}::test_writer_late_writes",),
    ),
    Guard(
        name="fresh-pod-list-reads-every-page",
        keeps="the in-use check before a delete or release counts the users on every page of the pod list",
        path=f"{RUNTIME}/domain_writer.py",
        find="        users += references.users_of(page.items, domain=domain.name, claim_template=domain.claim_template)",
        replace="        users = references.users_of(page.items, domain=domain.name, claim_template=domain.claim_template)",
        suite=(WRITER_MODEL,),
    ),
    # --- mnnvl_api/decisions/fencing.py: the fenced deletion's steps ---------------------------------------
    Guard(
        name="fence-users-abort-the-deletion",
        keeps="a domain a fresh read finds in use is not deleted (and loses its mark)",
        path=f"{DECISIONS}/fencing.py",
        find="    if users:\n        return Decision(step=Step.UNCONDEMN",
        replace="    if False:\n        return Decision(step=Step.UNCONDEMN",
        suite=(FENCE_PROTOCOL,),
    ),
    Guard(
        name="fence-waits-out-the-fence",
        keeps="every pod admitted before the mark is persisted before the in-use check that precedes the delete",
        path=f"{DECISIONS}/fencing.py",
        find="    if waited < fence_seconds:",
        replace="    if False:",
        suite=(FENCE_PROTOCOL,),
    ),
    Guard(
        name="fence-restarts-when-the-mark-was-not-seen",
        keeps="a process that did not see the mark begin (a restart) waits a whole fence again",
        path=f"{DECISIONS}/fencing.py",
        find="    waited = 0.0 if condemned_seen_at is None else now - condemned_seen_at",
        replace="    waited = fence_seconds if condemned_seen_at is None else now - condemned_seen_at",
        suite=(FENCE_PROTOCOL,),
    ),
    # --- mnnvl_runtime/admission.py and mnnvl_api/decisions/domains.py: admission onto a domain -----------
    Guard(
        name="admission-refuses-condemned-or-deleting-domains",
        keeps="no pod is admitted onto a domain that is condemned or being deleted (the fence relies on it)",
        path=f"{RUNTIME}/admission.py",
        find="    if refusal is not None:\n        raise retry(refusal)",
        replace="    if False:\n        raise retry(refusal)",
        suite=(REPLICA_ADMISSION, SLICE_ADMISSION),
    ),
    Guard(
        name="admission-refusal-of-a-deleting-domain",
        keeps="no pod is admitted onto a domain being deleted",
        path=f"{DECISIONS}/domains.py",
        find='    if domain.deleting:\n        return f"ComputeDomain {domain.name} is being deleted"',
        replace='    if False:\n        return f"ComputeDomain {domain.name} is being deleted"',
        suite=(REPLICA_ADMISSION,),
    ),
    Guard(
        name="admission-refusal-of-a-condemned-domain",
        keeps="no pod is admitted onto a condemned domain (the fence relies on it)",
        path=f"{DECISIONS}/domains.py",
        find='    if domain.condemned:\n        return f"ComputeDomain {domain.name} is about to be deleted"',
        replace='    if False:\n        return f"ComputeDomain {domain.name} is about to be deleted"',
        suite=(REPLICA_ADMISSION,),
    ),
    # --- mnnvl_api/decisions/domains.py: identity and readiness -------------------------------------------
    Guard(
        name="identity-labels-owned-by-one-manager",
        keeps="a domain whose identity labels someone else also wrote is not ours",
        path=f"{DECISIONS}/domains.py",
        # Without the check some owner is taken; the one that passes for ours is the adversary's choice.
        find="    return owners.pop() if len(owners) == 1 else None",
        replace="    return max(owners, default=None)",
        suite=(REPLICA_ADMISSION,),
    ),
    Guard(
        name="managed-requires-the-creator-to-be-the-manager",
        keeps="a look-alike labelled as ours but created by someone else is never touched (guardian)",
        path=f"{DECISIONS}/domains.py",
        find="            and self.created_by == self.managed_by\n",
        replace="",
        suite=(GUARDIAN_MODEL,),
    ),
    Guard(
        name="owned-by-requires-the-creator",
        keeps="a look-alike labelled as ours is never adopted: no pod is released onto it, no slice scaled",
        path=f"{DECISIONS}/domains.py",
        find="domain.managed_by == manager and domain.created_by == manager",
        replace="domain.managed_by == manager",
        suite=(REPLICA_PLANNER,),
    ),
    Guard(
        name="ready-requires-ownership",
        keeps="pods are released to the scheduler only onto a domain that is ours",
        path=f"{DECISIONS}/domains.py",
        find="        and is_owned_by(domain, owner_uid=owner_uid, manager=manager)\n",
        replace="",
        suite=(REPLICA_PLANNER,),
    ),
    Guard(
        name="ready-requires-a-live-domain",
        keeps="pods are not released onto a domain being deleted",
        path=f"{DECISIONS}/domains.py",
        find="        and not domain.deleting\n        and not domain.condemned\n",
        replace="        and not domain.condemned\n",
        suite=(REPLICA_PLANNER,),
    ),
    Guard(
        name="ready-requires-an-uncondemned-domain",
        keeps="pods are not released onto a condemned domain",
        path=f"{DECISIONS}/domains.py",
        find="        and not domain.condemned\n        and template_exists",
        replace="        and template_exists",
        suite=(REPLICA_PLANNER,),
    ),
    Guard(
        name="release-decision-requires-no-user",
        keeps="the finalizer stays while a live pod holds the domain's claim or records it",
        path=f"{DECISIONS}/domains.py",
        find="    return domain.deleting and domain.protected and not template_in_use",
        replace="    return domain.deleting and domain.protected",
        suite=(GUARDIAN_CONTRACTS,),
    ),
    # --- mnnvl_api/decisions/references.py: what counts as using a domain ---------------------------------
    Guard(
        name="pending-pods-count-as-users",
        keeps="a pod counts as a user until it has Succeeded or Failed, not only while it runs",
        path=f"{DECISIONS}/references.py",
        find='    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES',
        replace='    return (pod.get("status") or {}).get("phase") == "Running"',
        suite=(replica("admission_races"),),
    ),
    Guard(
        name="recording-pods-count-as-users",
        keeps="a pod that records the domain without holding its claim (a CPU-only leader) keeps it (fresh lists)",
        path=f"{DECISIONS}/references.py",
        find="        claim_template in referenced_claim_templates(pod) or recorded_domain(pod) == domain\n",
        replace="        claim_template in referenced_claim_templates(pod)\n",
        suite=(f"{WRITER_MODEL}::test_writer_fence_races",),
    ),
    # --- mnnvl_api/decisions/injection.py: what a pod joining a domain gets -------------------------------
    Guard(
        name="injection-refuses-a-foreign-channel-claim",
        keeps="a pod whose own claim takes the channel claim's name is refused, not admitted without our claim",
        path=f"{DECISIONS}/injection.py",
        find='    if existing is not None and existing.get("resourceClaimTemplateName") != claim_template:',
        replace="    if False:",
        suite=(REPLICA_ADMISSION, SLICE_ADMISSION),
    ),
    Guard(
        name="pods-joining-an-unready-domain-are-gated",
        keeps="a pod whose domain is not ready yet is held by the scheduling gate",
        path=f"{DECISIONS}/injection.py",
        find="    if gate:\n        patch += scheduling_gate_patch(spec)",
        replace="    if False:\n        patch += scheduling_gate_patch(spec)",
        suite=(replica("admission_races"),),
    ),
    # --- mnnvl_api/decisions/ownership.py: who controls a child LeaderWorkerSet ----------------------------
    Guard(
        name="ds-child-reference-names-the-labelled-set",
        keeps="a LeaderWorkerSet counts as a DisaggregatedSet's child only if its controller reference names that set",
        path=f"{DECISIONS}/ownership.py",
        find='        or reference.get("name") != ds_name\n',
        replace="",
        suite=(SLICE_ADMISSION,),
    ),
    # --- mnnvl_api/decisions/plans.py: the retirement rule of every scope ---------------------------------
    Guard(
        name="retire-keeps-used-domains",
        keeps="a domain a live pod uses is never planned for deletion",
        path=f"{DECISIONS}/plans.py",
        find="        if wanted(found) or used:",
        replace="        if wanted(found):",
        suite=(REPLICA_PLANNER,),
    ),
    # --- mnnvl_runtime/stores.py: watch stores -------------------------------------------------------------
    Guard(
        name="store-tombstones-objects-deleted-during-a-list",
        keeps="an object deleted while a list was in flight is not brought back by that list",
        path=f"{RUNTIME}/stores.py",
        find="            if uid in deleted or (uid in self._versions and not _newer(version, self._versions[uid])):",
        replace="            if uid in self._versions and not _newer(version, self._versions[uid]):",
        suite=(STORE_MODEL,),
    ),
    Guard(
        name="store-list-never-rolls-back-a-newer-event",
        keeps="a list older than an event already applied does not undo it",
        path=f"{RUNTIME}/stores.py",
        find="            if uid in deleted or (uid in self._versions and not _newer(version, self._versions[uid])):",
        replace="            if uid in deleted:",
        suite=(STORE_MODEL,),
    ),
    Guard(
        name="store-watch-event-never-rolls-back",
        keeps="a late watch event older than what a list gave is ignored",
        path=f"{RUNTIME}/stores.py",
        find="        if uid in self._versions and not _newer(version, self._versions[uid]):\n            return []",
        replace="        if False:\n            return []",
        suite=(STORE_MODEL,),
    ),
    Guard(
        name="store-drops-ghosts",
        keeps="an object a fresh list no longer has (its DELETED event lost) leaves the store",
        path=f"{RUNTIME}/stores.py",
        find="            if uid not in listed and (at is None or version is None or version <= at)",
        replace="            if False",
        suite=(STORE_MODEL,),
    ),
    Guard(
        name="store-keeps-objects-newer-than-the-list",
        keeps="an object created after the list was taken is not dropped as a ghost",
        path=f"{RUNTIME}/stores.py",
        find="            if uid not in listed and (at is None or version is None or version <= at)",
        replace="            if uid not in listed",
        suite=(STORE_MODEL,),
    ),
    Guard(
        name="store-sync-opens-only-after-complete-lists",
        keeps="the cache-sync barrier opens only once every mirror holds a complete list",
        path=f"{RUNTIME}/stores.py",
        find="            if complete and not self.synced.is_set():",
        replace="            if not self.synced.is_set():",
        suite=(STORE_MODEL,),
    ),
    Guard(
        name="store-counts-recording-pods",
        keeps="a pod that records a domain without holding its claim (a CPU-only leader) keeps it (stores)",
        path=f"{RUNTIME}/stores.py",
        find="        self.domain_recorders.put(uid, {(namespace, recorded): name} if recorded else {})",
        replace="        self.domain_recorders.put(uid, {})",
        suite=(STORE_MODEL,),
    ),
    Guard(
        name="store-indexes-workload-domains-by-manager",
        keeps="only the domains a controller manages are indexed under its workloads",
        path=f"{RUNTIME}/stores.py",
        find="        if facts.workload and (manager is None or facts.managed_by == manager):",
        replace="        if facts.workload:",
        suite=(STORE_MODEL,),
    ),
    # --- mnnvl_runtime/indexes.py ----------------------------------------------------------------------------
    # --- mnnvl_runtime/reconciling.py, workqueue.py and leases.py: who may decide and write ------------
    Guard(
        name="reconcile-waits-for-the-cache-sync-barrier",
        keeps="no pass decides from stores that do not hold a complete list yet",
        path=f"{RUNTIME}/reconciling.py",
        find="        await self.sync.synced.wait()  # no decision before every store holds a complete list\n",
        replace="",
        suite=(LEASE_MODEL,),
    ),
    Guard(
        name="workqueue-rechecks-the-lease-before-a-pass",
        keeps="no pass starts on a replica that stepped down while it waited for a key",
        path=f"{RUNTIME}/workqueue.py",
        find="            if not self.elector.may_write():\n                self.enqueue(key)",
        replace="            if False:\n                self.enqueue(key)",
        suite=(LEASE_MODEL,),
    ),
    Guard(
        name="may-write-requires-a-recent-renewal",
        keeps="a leader that has not renewed within the deadline stops writing before another can take over",
        path=f"{RUNTIME}/leases.py",
        find="        return self._without_lease or self._clock() - self._last_renewal < self.timing.renew_deadline",
        replace="        return True",
        suite=(LEASE_MODEL,),
    ),
    Guard(
        name="lease-claim-waits-for-expiry",
        keeps="a replica takes the Lease only once the holder's record has expired: one leader at a time",
        path=f"{RUNTIME}/leases.py",
        find="    if current != holder and not expired:\n        return None",
        replace="    if False:\n        return None",
        suite=(LEASE_MODEL,),
    ),
    Guard(
        name="writes-sent-only-under-a-valid-permit",
        keeps="a cancelled pass's thread sends no write (nor a retry) once its replica may no longer write",
        path=f"{RUNTIME}/kube.py",
        find="            if not self.valid():\n                raise WriteWithdrawnError",
        replace="            if False:\n                raise WriteWithdrawnError",
        suite=(WRITE_PERMIT_MODEL,),
    ),
    Guard(
        name="pass-writes-counted-under-the-permit",
        keeps="the Lease is released only when no write of a pass is on its way",
        path=f"{RUNTIME}/kube.py",
        find="        permit = WRITE_PERMIT.get() if method in MUTATING_METHODS else None",
        replace="        permit = None",
        suite=(WRITE_PERMIT_MODEL,),
    ),
    Guard(
        name="release-waits-for-writes-on-their-way",
        keeps="the next leader cannot start while a write of the last one is still on its way",
        path=f"{RUNTIME}/leases.py",
        find="        if not await asyncio.to_thread(self.permit.wait_idle, self.timing.renew_deadline):",
        replace="        if False:",
        suite=(WRITE_PERMIT_MODEL,),
    ),
    # --- mnnvl_lws/rules.py: replica-scope pod admission -----------------------------------------------
    Guard(
        name="worker-statefulset-uid-check",
        keeps="a worker of a replaced StatefulSet is not bound to the current leader's domain",
        path=f"{LWS}/rules.py",
        find='        if sts_meta.get("uid") != owner.get("uid"):',
        replace="        if False:",
        suite=(REPLICA_ADMISSION,),
    ),
    Guard(
        name="worker-leader-uid-check",
        keeps="a worker of a previous leader incarnation is not bound to the current leader's domain",
        path=f"{LWS}/rules.py",
        find='        if leader_ref is not None and leader_ref.get("uid") != leader_meta.get("uid"):',
        replace="        if False:",
        suite=(replica("stale_stores"),),
    ),
    Guard(
        name="worker-leader-live-check",
        keeps="no worker is admitted onto the domain of a leader that is finished or being deleted",
        path=f"{LWS}/rules.py",
        find='    if leader_meta.get("deletionTimestamp") or not references.is_non_terminal(leader):',
        replace="    if False:",
        suite=(REPLICA_ADMISSION,),
    ),
    Guard(
        name="leader-recorded-name-must-be-derived",
        keeps="a leader's own compute-domain-name is refused unless it is a name of its group",
        path=f"{LWS}/rules.py",
        find="    if position.is_leader and names.replica_domain_token(recorded, position.lws, position.group) is None:",
        replace="    if False:",
        suite=(REPLICA_ADMISSION,),
    ),
    Guard(
        name="worker-recorded-name-must-be-its-leaders",
        keeps="a worker's own compute-domain-name is refused unless it is its leader's domain",
        path=f"{LWS}/rules.py",
        find="    if not position.is_leader and recorded != leader_domain:",
        replace="    if False:",
        suite=(REPLICA_ADMISSION,),
    ),
    # --- mnnvl_runtime/scopes.py ------------------------------------------------------------------------------
    Guard(
        name="scopes-create-for-the-live-workload",
        keeps="a domain is created for the workload as it is, never an earlier one of its name the stores hold",
        path=f"{RUNTIME}/scopes.py",
        find="        if plan.create and not await self.still_current(snapshot):",
        replace="        if False:",
        suite=(replica("reincarnations"),),
    ),
    # --- mnnvl_lws/pod_admission.py ----------------------------------------------------------------------------
    Guard(
        name="lws-admission-creates-for-the-live-lws",
        keeps="the webhook creates a leader's domain for its LWS read afresh, never one its stores still hold",
        path=f"{LWS}/pod_admission.py",
        find="    workload = None if fresh is None else stores.workload_of(fresh)\n",
        replace="    workload = stores.workload(start.namespace, start.lws)\n",
        suite=(replica("reincarnations"),),
    ),
    Guard(
        name="lws-opt-in-confirmed-afresh",
        keeps="a leader of an LWS the webhook's stores do not know yet still gets its claim and gate",
        path=f"{LWS}/pod_admission.py",
        find="    if known is not None and known.opted_in:\n        return True\n",
        replace="    if True:\n        return known is not None and known.opted_in\n",
        suite=(replica("admission_races"),),
    ),
    # --- mnnvl_api/decisions/plans.py: what every scope's planner shares -----------------------------------------
    Guard(
        name="scopes-ungate-only-onto-ready-domains",
        keeps="a pod is released to the scheduler only once its domain is ours, live and ready (both scopes)",
        path=f"{DECISIONS}/plans.py",
        find="    return [p for p in pods if p.gated and not p.terminal and not p.deleting and p.domain in ready]",
        replace="    return [p for p in pods if p.gated and not p.terminal and not p.deleting]",
        suite=(REPLICA_PLANNER, SLICE_PLANNER),
    ),
    Guard(
        name="scopes-is-ours-requires-the-creator",
        keeps="a look-alike labelled as ours is never condemned, deleted or released (both scopes)",
        path=f"{DECISIONS}/plans.py",
        find="        and domain.created_by == manager\n",
        replace="",
        suite=(REPLICA_PLANNER, SLICE_PLANNER),
    ),
    Guard(
        name="scopes-claim-holders-keep-the-domain",
        keeps="a domain whose claim a live pod holds stays (both scopes)",
        path=f"{DECISIONS}/plans.py",
        find="        in_use=lambda found: found.claim_template in snapshot.templates_in_use or found.name in recorded,",
        replace="        in_use=lambda found: found.name in recorded,",
        suite=(REPLICA_PLANNER, SLICE_PLANNER),
    ),
    Guard(
        name="scopes-recorders-keep-the-domain",
        keeps="a domain a live pod records (a CPU-only leader) stays (both scopes)",
        path=f"{DECISIONS}/plans.py",
        find="        in_use=lambda found: found.claim_template in snapshot.templates_in_use or found.name in recorded,",
        replace="        in_use=lambda found: found.claim_template in snapshot.templates_in_use,",
        suite=(REPLICA_PLANNER, SLICE_PLANNER),
    ),
    # --- mnnvl_lws/planner.py --------------------------------------------------------------------------------
    Guard(
        name="lws-planner-trusts-only-derived-leader-names",
        keeps="no domain is created or kept current for a name the replica scope does not derive",
        path=f"{LWS}/planner.py",
        find="    valid_leaders = [p for p in live_leaders if has_valid_domain(p, snapshot.workload_name)]",
        replace="    valid_leaders = live_leaders",
        suite=(REPLICA_PLANNER,),
    ),
    Guard(
        name="lws-ungates-workers-only-onto-their-leaders-domain",
        keeps="a worker runs only on its live leader's domain: one group, one domain",
        path=f"{LWS}/planner.py",
        find=" if p.is_leader or leader_domains.get(p.group) == p.domain\n",
        replace="\n",
        suite=(REPLICA_PLANNER,),
    ),
    Guard(
        name="lws-is-ours-requires-a-derived-name",
        keeps="only a domain whose name the replica scope derives from its labels is retired (replica scope)",
        path=f"{LWS}/planner.py",
        find="        and names.replica_domain_token(domain.name, lws_name, int(group)) is not None\n",
        replace="",
        suite=(REPLICA_PLANNER,),
    ),
    # --- mnnvl_ds/slice_admission.py: slice-scope pod and child LWS admission ------------------------------------
    Guard(
        name="ds-pod-joins-only-its-own-sets-domain",
        keeps="a pod of a child LWS of another DisaggregatedSet incarnation does not join this one's domain",
        path=f"{DS}/slice_admission.py",
        find="        return workload is not None and workload.uid == child.owner_uid and (workload.opted_in or child.slice_scope)",
        replace="        return workload is not None and (workload.opted_in or child.slice_scope)",
        suite=(SLICE_ADMISSION,),
    ),
    Guard(
        name="ds-opt-in-confirmed-afresh",
        keeps="a pod of a DisaggregatedSet the webhook's stores do not know yet still gets its claim and gate",
        path=f"{DS}/slice_admission.py",
        find="    if fits(known):\n        return known\n",
        replace="    if True:\n        return known if fits(known) else None\n",
        suite=(SLICE_ADMISSION,),
    ),
    # --- mnnvl_ds/rules.py -------------------------------------------------------------------------------
    Guard(
        name="ds-child-refused-while-a-foreign-domain-holds-its-name",
        keeps="a slice whose domain name a look-alike holds is never scaled",
        path=f"{DS}/rules.py",
        find="    if domain is not None and not domains.is_owned_by(",
        replace="    if False and not domains.is_owned_by(",
        suite=(slice_scope("stale_stores"),),
    ),
    Guard(
        name="ds-child-refused-while-the-gate-is-off",
        keeps="with the gate off, an enrolled role gets no new child LWS whose pods would lack the claim",
        path=f"{DS}/rules.py",
        find="    if not gate_enabled:\n        if not role_enrolled:\n            return []",
        replace="    if not gate_enabled:\n        if True:\n            return []",
        suite=(SLICE_ADMISSION,),
    ),
    Guard(
        name="ds-recorded-name-must-be-the-slices",
        keeps="a slice pod's own compute-domain-name is refused unless it is its slice and revision's domain",
        path=f"{DS}/rules.py",
        find="    if recorded is not None and recorded != domain:",
        replace="    if False:",
        suite=(SLICE_ADMISSION,),
    ),
    # --- mnnvl_ds/planner.py ---------------------------------------------------------------------------------
    Guard(
        name="ds-active-only-for-the-current-sets-children",
        keeps="a child LWS of an earlier DisaggregatedSet incarnation gets no domain of the current one",
        path=f"{DS}/planner.py",
        find="        if child.slice_scope and not child.deleting and child.owner_uid == workload.uid",
        replace="        if child.slice_scope and not child.deleting",
        suite=(SLICE_PLANNER,),
    ),
    Guard(
        name="ds-is-ours-requires-a-derived-name",
        keeps="only a domain whose name the slice scope derives from its labels is retired (slice scope)",
        path=f"{DS}/planner.py",
        find="        and domain.name == domain_name(ds_name, position)\n",
        replace="",
        suite=(SLICE_PLANNER,),
    ),
    # --- mnnvl_guardian ----------------------------------------------------------------------------------------
    Guard(
        name="guardian-deny-refuses-deleting-a-used-domain",
        keeps="in Deny mode, the DELETE of a managed domain that live pods use is refused",
        path=f"{GUARDIAN}/admission.py",
        find="        if reason is not None:\n            telemetry.REFUSALS.inc()",
        replace="        if False:\n            telemetry.REFUSALS.inc()",
        suite=(GUARDIAN_MODEL,),
    ),
    # This guard and guardian-indexes-only-managed-domains keep the same promise twice (the planner sees only what
    # the stores let in); each layer's own contract (`test_guardian_contracts.py`) catches its removal.
    Guard(
        name="guardian-acts-only-on-managed-domains",
        keeps="the guardian never protects or releases a domain that is not managed by mnnvl (by identity)",
        path=f"{GUARDIAN}/planner.py",
        find="    if not domain.managed:\n        return Action.NOTHING",
        replace="    if False:\n        return Action.NOTHING",
        suite=(GUARDIAN_CONTRACTS,),
    ),
    Guard(
        name="guardian-releases-only-with-the-gate-on",
        keeps="with the gate disabled the guardian releases nothing",
        path=f"{GUARDIAN}/planner.py",
        find="    if gate_enabled and domains.may_release(domain, template_in_use=template_in_use):",
        replace="    if domains.may_release(domain, template_in_use=template_in_use):",
        suite=(GUARDIAN_MODEL,),
    ),
    Guard(
        name="guardian-indexes-only-managed-domains",
        keeps="a look-alike never enters the guardian's stores",
        path=f"{GUARDIAN}/state.py",
        find="        self.shared.apply_domain(uid, body if body is not None and domains.facts_of(body).managed else None)",
        replace="        self.shared.apply_domain(uid, body)",
        suite=(GUARDIAN_CONTRACTS,),
    ),
    Guard(
        name="guardian-protects-only-a-fresh-managed-domain",
        keeps="the protection finalizer is added only to a domain that, read afresh, is managed by mnnvl",
        path=f"{GUARDIAN}/executor.py",
        find="    if not domains.facts_of(current).managed:\n        return None",
        replace="    if False:\n        return None",
        suite=(GUARDIAN_MODEL,),
    ),
    Guard(
        name="guardian-protection-preconditioned-on-the-version",
        keeps="adding the finalizer never replaces a finalizer another controller added meanwhile",
        path=f"{GUARDIAN}/executor.py",
        find='    version = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}]',
        replace="    version: list[dict[str, str]] = []",
        suite=(GUARDIAN_MODEL,),
    ),
    Guard(
        name="guardian-release-checks-identity",
        keeps="the guardian releases the finalizer only from a domain that, read afresh, is managed by mnnvl",
        path=f"{GUARDIAN}/executor.py",
        find="def _managed(domain: domains.DomainFacts) -> bool:\n    return domain.managed",
        replace="def _managed(domain: domains.DomainFacts) -> bool:\n    return True",
        suite=(GUARDIAN_MODEL,),
    ),
    # --- stores and admission: the newest object, fresh reads on a mismatch, the worker's domain, identity ----
    Guard(
        name="newest-prefers-newest",
        keeps="a stale store entry (deletion hidden by a relist) never shadows its same-named successor",
        path="packages/mnnvl-runtime/src/mnnvl_runtime/indexes.py",
        find="newest = max(found, key=lambda obj: self._versions.get(obj, UNVERSIONED))",
        replace="newest = next(iter(found))",
        suite=(STORE_MODEL,),
    ),
    Guard(
        name="ds-read-afresh-on-mismatch",
        keeps="the stores answer for a slice pod only when they hold the child and set the pod belongs to",
        path="packages/mnnvl-ds/src/mnnvl_ds/slice_admission.py",
        find="stored.slice_scope and rules.stores_agree(pod, stored, known):",
        replace="stored.slice_scope:",
        suite=(SLICE_ADMISSION,),
    ),
    Guard(
        name="lws-read-afresh-on-mismatch",
        keeps="a replica pod is bound against the LeaderWorkerSet that exists, not a previous one the stores hold",
        path="packages/mnnvl-lws/src/mnnvl_lws/pod_admission.py",
        find="if domain is None or (known is not None and known.uid == domain.owner_uid):",
        replace="if True:",
        suite=(REPLICA_ADMISSION,),
    ),
    Guard(
        name="worker-derived-domain",
        keeps="one group, one domain: a leader's edited record cannot steer its worker onto another domain",
        path="packages/mnnvl-lws/src/mnnvl_lws/rules.py",
        find="    return leader_domain(leader, position)\n",
        replace="    return references.recorded_domain(leader)\n",
        suite=(REPLICA_ADMISSION,),
    ),
    Guard(
        name="worker-of-an-unstamped-leader-waits",
        keeps="no opted-in pod runs without its claim: a stamped worker of a leader made without the scope waits",
        path="packages/mnnvl-lws/src/mnnvl_lws/rules.py",
        find='if ((leader.get("metadata") or {}).get("labels") or {}).get(keys.SCOPE_LABEL) != keys.SCOPE_REPLICA:',
        replace="if False:",
        suite=(REPLICA_ADMISSION,),
    ),
    Guard(
        name="worker-of-a-leader-without-domain-waits-when-opted-in",
        keeps="no opted-in pod runs without its claim: a worker whose leader has no domain runs alone only unopted",
        path="packages/mnnvl-lws/src/mnnvl_lws/pod_admission.py",
        find="if binding is None and await _opted_in(client, stores, namespace, position.lws, _revision_of(worker)):",
        replace="if False:",
        suite=(REPLICA_ADMISSION,),
    ),
    Guard(
        name="worker-leader-uid",
        keeps="one group, one domain: a worker binds to the current incarnation of its leader only",
        path="packages/mnnvl-lws/src/mnnvl_lws/rules.py",
        find='if leader_ref is not None and leader_ref.get("uid") != leader_meta.get("uid"):',
        replace="if False:",
        suite=(replica("stale_stores"),),
    ),
    Guard(
        name="field-manager-impersonation-refused",
        keeps="nothing foreign passes for ours: only a controller itself writes as its field manager",
        path="packages/mnnvl-api/src/mnnvl_api/decisions/field_managers.py",
        find="if requester == own_user or not wrote_as(manager, meta, old_meta):",
        replace="if True:",
        suite=(IDENTITY_WRITES,),
    ),
    # --- opted-in revisions after an opt-out, and the gate off -------------------------------------------
    Guard(
        name="a-stamped-revision-keeps-its-claim",
        keeps="no opted-in pod runs without its claim: a leader of a revision upstream recorded stamped, after opt-out",
        path="packages/mnnvl-lws/src/mnnvl_lws/pod_admission.py",
        find="return revision is not None and await _revision_opted_in(client, stores, fresh, revision)",
        replace="return False",
        suite=(replica("interleavings"), replica("opt_outs")),
    ),
    Guard(
        name="a-stamped-revision-keeps-its-domain",
        keeps="a leader of a stamped revision admitted after opt-out gets its domain created and is released",
        path="packages/mnnvl-lws/src/mnnvl_lws/planner.py",
        find="return workload.opted_in or leader.revision in stamped_revisions",
        replace="return workload.opted_in",
        suite=(REPLICA_PLANNER,),
    ),
    Guard(
        name="a-stamped-child-keeps-its-claim",
        keeps="no opted-in pod runs without its claim: a pod of a stamped child after its set opted out",
        path="packages/mnnvl-ds/src/mnnvl_ds/slice_admission.py",
        find="(workload.opted_in or child.slice_scope)",
        replace="workload.opted_in",
        suite=(SLICE_ADMISSION,),
    ),
    Guard(
        name="a-stamped-child-keeps-its-slice-domain",
        keeps="a stamped child's (slice, revision) gets its domain after its set opted out, until the rollout drains it",
        path="packages/mnnvl-ds/src/mnnvl_ds/planner.py",
        find="                if not workload.deleting:",
        replace="                if workload.opted_in and not workload.deleting:",
        suite=(SLICE_PLANNER,),
    ),
    Guard(
        name="refuse-child-scale-up-while-gate-off",
        keeps="no enrolled slice grows without claims while the gate is off: scale-up of an enrolled role's child",
        path="packages/mnnvl-ds/src/mnnvl_ds/rules.py",
        find="        if not role_enrolled:",
        replace="        if not creating or not role_enrolled:",
        suite=(SLICE_ADMISSION,),
    ),
    Guard(
        name="refuse-enrolled-pods-while-gate-off",
        keeps="no pod of an enrolled role runs without its claim while the gate is off (it is refused for retry)",
        path="packages/mnnvl-ds/src/mnnvl_ds/slice_admission.py",
        find="        await _refuse_while_gate_off(client, namespace, await _fresh_child(client, namespace, lws_name))\n",
        replace="        await _fresh_child(client, namespace, lws_name)\n",
        suite=(SLICE_ADMISSION,),
    ),
    # --- mnnvl-guardian: the Deny answer ------------------------------------------------------------------
    Guard(
        name="guardian-deny-refuses-in-use-deletion",
        keeps="no domain starts deleting while a non-terminal pod references it (Deny mode)",
        path="packages/mnnvl-guardian/src/mnnvl_guardian/admission.py",
        find="            raise kopf.AdmissionError(reason, code=403)",
        replace="            return",
        suite=(GUARDIAN_MODEL,),
    ),
    Guard(
        name="guardian-deny-fresh-check-before-allowing",
        keeps="a deletion the guardian's stores see no user for is allowed only after a fresh list finds none",
        path="packages/mnnvl-guardian/src/mnnvl_guardian/admission.py",
        find="    if not users:\n        named = await writer.fresh_users(domain)",
        replace="    if False:\n        named = await writer.fresh_users(domain)",
        suite=(GUARDIAN_MODEL,),
    ),
    Guard(
        name="guardian-deny-refuses-when-unverified",
        keeps="a deletion whose in-use check did not finish in time (or failed) is refused, never allowed unchecked",
        path="packages/mnnvl-guardian/src/mnnvl_guardian/admission.py",
        find="        return planner.unverified(domain, within)",
        replace="        return None",
        suite=(GUARDIAN_MODEL,),
    ),
    # --- the fence: per mark, per Lease term, and its minimum -----------------------------------------------
    Guard(
        name="fence-timed-per-mark",
        keeps="no domain deleted under a pod: a mark lifted and set again gets a fence of its own",
        path="packages/mnnvl-api/src/mnnvl_api/decisions/fencing.py",
        find=" and previous.mark == mark and ",
        replace=" and ",
        suite=(FENCE_PROTOCOL,),
    ),
    Guard(
        name="fence-mark-nonce",
        keeps="no domain deleted under a pod: every condemned mark carries a value of its own",
        path="packages/mnnvl-runtime/src/mnnvl_runtime/domain_writer.py",
        find='    return f"{component}/{uuid.uuid4().hex}"',
        replace="    return component",
        suite=(FENCE_PROTOCOL,),
    ),
    Guard(
        name="fence-forgotten-on-lease-change",
        keeps="no domain deleted under a pod: a replica leading again trusts no sighting from an earlier term",
        path="packages/mnnvl-api/src/mnnvl_api/decisions/fencing.py",
        find=" and previous.term == term:",
        replace=":",
        suite=(FENCE_PROTOCOL,),
    ),
    Guard(
        name="fence-counted-to-the-list-start",
        keeps="no domain deleted under a pod: the fence is counted to when the final pod list began",
        path="packages/mnnvl-runtime/src/mnnvl_runtime/domain_writer.py",
        find="            now=checked_at,\n            fence_seconds=self.fence_seconds,\n",
        replace="            now=self.clock(),\n            fence_seconds=self.fence_seconds,\n",
        suite=(f"{WRITER_MODEL}::test_writer_slow_lists",),
    ),
    Guard(
        name="fence-minimum-in-the-loader",
        keeps="no domain deleted under a pod: a fence shorter than the API server's request timeout is refused",
        path="packages/mnnvl-api/src/mnnvl_api/models/configuration.py",
        find="        elif self.deletion_fence_seconds < minimum:\n",
        replace="        elif self.deletion_fence_seconds < 0:\n",
        suite=(replica("admission_races"),),
    ),
    # --- mnnvl-topology: the installation identity -------------------------------------------------------
    Guard(
        name="topology-identity-field-manager",
        keeps="nothing foreign written: a Topology or binding labelled ours is ours only if our field manager wrote it",
        path="packages/mnnvl-topology/src/mnnvl_topology/topologies.py",
        find=(
            "    if domains.identity_owner(meta, labels=(keys.MANAGED_BY_LABEL,), annotations=identity) "
            "!= keys.TOPOLOGY_CONTROLLER:"
        ),
        replace="    if False:",
        suite=(TOPOLOGY_MODEL,),
    ),
    Guard(
        name="topology-identity-installation",
        keeps="nothing foreign written: another installation's Topologies and bindings are never ours",
        path="packages/mnnvl-topology/src/mnnvl_topology/topologies.py",
        find="    return Provenance.OURS if recorded == installation else Provenance.OTHER_INSTALLATION",
        replace="    return Provenance.OURS",
        suite=(TOPOLOGY_MODEL,),
    ),
    Guard(
        name="topology-identity-annotation-writer",
        keeps="nothing foreign written: an installation annotation written by someone else makes nothing ours",
        path="packages/mnnvl-topology/src/mnnvl_topology/topologies.py",
        find="annotations=identity) != keys.TOPOLOGY_CONTROLLER",
        replace="annotations=()) != keys.TOPOLOGY_CONTROLLER",
        suite=(TOPOLOGY_MODEL,),
    ),
    Guard(
        name="topology-never-delete-legacy",
        keeps="nothing foreign written: an earlier version's unconfigured object (maybe another installation's) stays",
        path="packages/mnnvl-topology/src/mnnvl_topology/topologies.py",
        find="    return name not in set(wanted) and provenance(found, installation=installation) is Provenance.OURS",
        replace="    return name not in set(wanted) and _may_write(found, installation=installation)",
        suite=(TOPOLOGY_MODEL,),
    ),
    Guard(
        name="topology-foreign-topology-untouched",
        keeps="nothing foreign written: a same-named Topology not ours is neither patched, adopted nor recreated",
        path="packages/mnnvl-topology/src/mnnvl_topology/topologies.py",
        find=(
            "        return Action.CREATE\n    if not _may_write(found, installation=installation):\n"
            "        return Action.FOREIGN\n    wanted, present"
        ),
        replace="        return Action.CREATE\n    wanted, present",
        suite=(TOPOLOGY_MODEL,),
    ),
    Guard(
        name="topology-foreign-binding-untouched",
        keeps="nothing foreign written: a same-named ClusterTopologyBinding not ours is neither patched nor adopted",
        path="packages/mnnvl-topology/src/mnnvl_topology/topologies.py",
        find="    if not _may_write(found, installation=installation):\n        return Action.FOREIGN\n    spec, present",
        replace="    spec, present",
        suite=(TOPOLOGY_MODEL,),
    ),
    Guard(
        name="topology-write-as-read",
        keeps="nothing foreign written: an apply over a Topology or binding fails if it changed hands since the read",
        path="packages/mnnvl-topology/src/mnnvl_topology/topologies.py",
        find='    meta = {**desired["metadata"], "resourceVersion": found["metadata"]["resourceVersion"]}',
        replace='    meta = {**desired["metadata"]}',
        suite=(TOPOLOGY_MODEL,),
    ),
    Guard(
        name="topology-delete-as-read",
        keeps="nothing foreign written: a delete fails if the object changed hands since the read",
        path="packages/mnnvl-topology/src/mnnvl_topology/topology_writer.py",
        find='return await self.client.adelete(path, uid=meta["uid"], resource_version=meta["resourceVersion"])',
        replace='return await self.client.adelete(path, uid=meta["uid"])',
        suite=(TOPOLOGY_MODEL,),
    ),
)
