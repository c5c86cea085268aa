"""The replica scope's pod webhook (`mnnvl_lws.pod_admission.admit_pod`) over arbitrary worlds.

The interleaving model (`test_interleavings.py`) admits the pods upstream LWS makes, in the orders it makes them.
This property asks the webhook about any pod a user or a stale controller could create, against any history of
the objects it reads: LeaderWorkerSets deleted and recreated under one name, leader pods and their worker
StatefulSets of several incarnations, leaders finished or being deleted, records on pods edited or forged, domains
made by us or by others (or relabelled), condemned or being deleted, and watch stores that lost any of the events
(a relist). The promise is judged against what the API holds at the moment of the answer, by rules written here
independently of the webhook's code:

- no pod is admitted onto a domain that is condemned or being deleted;
- a pod runs at once (no gate) only on a domain that is ours, made for the LeaderWorkerSet that exists now, alive
  and with its claim template;
- every GPU container of a pod admitted onto a domain holds that domain's channel claim;
- a worker joins exactly the domain its current, live leader was given (one group, one domain), and nothing when
  that leader, stamped for the replica scope, was given none and the workload has not opted in (now, or at the
  worker's revision); a leader made without the scope admits no worker (the worker carries the scope and would run
  without its channel);
- a leader of an opted-in LeaderWorkerSet (or of a revision upstream recorded stamped) gets a domain of its group;
- a leader of a LeaderWorkerSet that did not opt in is never refused.
"""

from __future__ import annotations

import copy
import dataclasses
import re

from hypothesis import event, given
from hypothesis import strategies as st

from mnnvl_api import keys, names
from mnnvl_lws import planner, pod_admission, state

from ..mnnvl_api import pods
from ..mnnvl_runtime.memory_api import DELETED_AT, MemoryApi, Object
from . import settings
from .worlds import (
    NS,
    THEIRS,
    answer,
    controller_of,
    fed,
    holds_channel_claim,
    is_gated,
    leaving,
    made_by,
    mostly,
    put_domain,
    uid_of,
)

LWS = "w"
LEADER = "w-0"
WORKER = "w-0-1"
#: The token of the domain the webhook gives a leader without one; no domain of the world takes it.
TOKEN = "bcdfg"
#: Domains a world may hold: two of group 0 (a leader's incarnations), one of group 1, and one no rule derives.
OWN_DOMAINS = (names.replica_domain_name(LWS, 0, "x7k2b"), names.replica_domain_name(LWS, 0, "q9m4z"))
OTHER_GROUP = names.replica_domain_name(LWS, 1, "x7k2b")
NOT_DERIVED = "someone-elses-domain"
RECORDS = (*OWN_DOMAINS, OTHER_GROUP, NOT_DERIVED)
OPT_IN = st.sampled_from((keys.OPT_IN_ENABLED, keys.OPT_IN_DISABLED, None))
REVISION = "r1"


def opted_in(value: str | None) -> bool:
    return value == keys.OPT_IN_ENABLED


def lws_body(opt_in: str | None) -> Object:
    annotations = {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: opt_in} if opt_in is not None else {}
    return {"metadata": {"name": LWS, "namespace": NS, "annotations": annotations}}


def pod_body(
    name: str, *, spec: Object, record: str | None, claim: str | None, revision: str | None, scoped: bool = True
) -> Object:
    labels = {keys.LWS_NAME_LABEL: LWS}
    if scoped:
        labels[keys.SCOPE_LABEL] = keys.SCOPE_REPLICA
    if revision is not None:
        labels[keys.LWS_TEMPLATE_REVISION_HASH_LABEL] = revision
    annotations = {keys.LWS_LEADER_NAME_ANNOTATION: LEADER}
    if record is not None:
        annotations[keys.COMPUTE_DOMAIN_NAME_ANNOTATION] = record
    body: Object = {
        "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations},
        "spec": copy.deepcopy(spec),
    }
    if claim is not None:
        body["spec"]["resourceClaims"] = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": claim}]
    return body


@dataclasses.dataclass
class World:
    api: MemoryApi
    #: uids of every LeaderWorkerSet, leader and StatefulSet incarnation, oldest first
    lws_uids: list[str] = dataclasses.field(default_factory=list)
    leader_uids: list[str] = dataclasses.field(default_factory=list)
    statefulset_uids: list[str] = dataclasses.field(default_factory=list)


def build_lws(world: World, data: st.DataObject) -> None:
    """Incarnations of the LeaderWorkerSet, each deleted before the next; the last may be gone too."""
    values = data.draw(st.lists(OPT_IN, max_size=2), label="earlier LeaderWorkerSets")
    values.append(data.draw(mostly(keys.OPT_IN_ENABLED, keys.OPT_IN_DISABLED, None), label="LeaderWorkerSet"))
    for index, value in enumerate(values):
        if index:
            world.api.delete(keys.LWS_PLURAL, NS, LWS)
        world.lws_uids.append(uid_of(world.api.put(keys.LWS_PLURAL, lws_body(value), manager="kubectl")))
    if data.draw(settings.RARELY, label="LeaderWorkerSet gone"):
        world.api.delete(keys.LWS_PLURAL, NS, LWS)
    for uid in data.draw(st.lists(st.sampled_from(world.lws_uids), max_size=2, unique=True), label="revisions"):
        stamped = data.draw(st.booleans(), label="revision stamped")
        template: Object = {"leaderTemplate": {"metadata": {}}, "workerTemplate": {"metadata": {}}}
        if stamped:
            template["workerTemplate"]["metadata"]["annotations"] = {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: LWS}
        revision = {
            "metadata": {
                "name": f"{LWS}-{REVISION}-{uid}",
                "namespace": NS,
                "labels": {keys.LWS_NAME_LABEL: LWS, keys.LWS_TEMPLATE_REVISION_HASH_LABEL: REVISION},
                "ownerReferences": [
                    {
                        "apiVersion": keys.LWS_API_VERSION,
                        "kind": "LeaderWorkerSet",
                        "name": LWS,
                        "uid": uid,
                        "controller": True,
                    }
                ],
            },
            "data": {"spec": {"leaderWorkerTemplate": template}},
        }
        world.api.put("controllerrevisions", revision, manager="lws")


def build_group(world: World, data: st.DataObject) -> None:
    """Incarnations of the leader pod and of its worker StatefulSet; the current ones may be finished, leaving, or
    gone."""
    for index in range(data.draw(mostly(1, 0, 2), label="leader incarnations")):
        if index:
            world.api.delete("pods", NS, LEADER)
        record = data.draw(mostly(*RECORDS, None), label="leader's record")
        holds = data.draw(mostly("the record's", "another's", "none"), label="leader's claim")
        claim = {
            "the record's": names.claim_template_name(record) if record else None,
            "another's": names.claim_template_name(OWN_DOMAINS[1]),
            "none": None,
        }[holds]
        spec = data.draw(mostly(pods.deepseek_worker_spec(), pods.cpu_leader_spec()), label="leader's spec")
        # A leader made from a template without the scope (upstream builds its workers from the current one).
        scoped = data.draw(mostly(True, False), label="leader stamped for the replica scope")
        body = pod_body(LEADER, spec=spec, record=record, claim=claim, revision=None, scoped=scoped)
        body["status"] = {
            "phase": data.draw(mostly("Running", "Pending", "Succeeded", "Failed"), label="leader's phase")
        }
        world.leader_uids.append(uid_of(world.api.put("pods", body, manager="kubelet")))
    if bool(world.leader_uids) and data.draw(settings.RARELY, label="leader leaving"):
        world.api.delete("pods", NS, LEADER, grace_until=DELETED_AT)
    for index in range(data.draw(st.sampled_from((1, 2, 2, 0)), label="StatefulSet incarnations")):
        if index:
            world.api.delete("statefulsets", NS, LEADER)
        meta: Object = {"name": LEADER, "namespace": NS}
        owner = data.draw(mostly(*reversed(world.leader_uids), None), label="StatefulSet's leader")
        if owner is not None:
            meta["ownerReferences"] = controller_of("Pod", LEADER, owner)
        world.statefulset_uids.append(uid_of(world.api.put("statefulsets", {"metadata": meta}, manager="lws")))


def build_domains(world: World, data: st.DataObject) -> None:
    """Each domain name: absent, or made (`put_domain`) for some LeaderWorkerSet incarnation."""
    for name in (*OWN_DOMAINS, OTHER_GROUP):
        if not world.lws_uids or not data.draw(
            mostly(name == OWN_DOMAINS[0], name != OWN_DOMAINS[0]), label=f"{name} exists"
        ):
            continue
        owner = data.draw(mostly(*reversed(world.lws_uids)), label="domain's owner")
        group = 1 if name == OTHER_GROUP else 0
        labels = planner.domain_labels(
            planner.LeaderWorkerSetFacts(namespace=NS, name=LWS, uid=owner, deleting=False), group
        )
        put_domain(world.api, name, labels, data, ours=keys.LWS_CONTROLLER)


def pod_to_admit(world: World, data: st.DataObject) -> Object:
    """A leader (a new incarnation) or a worker of group 0, as upstream makes it or as anyone could write it."""
    leader = data.draw(st.booleans(), label="admitting a leader")
    spec = data.draw(mostly(pods.deepseek_worker_spec(), pods.cpu_leader_spec()), label="pod spec")
    record = data.draw(mostly(None, *RECORDS), label="pod's own record")
    claim = data.draw(mostly(None, names.claim_template_name(OWN_DOMAINS[0]), THEIRS), label="pod's own claim")
    revision = data.draw(st.sampled_from((None, REVISION)), label="pod's revision")
    body = pod_body(LEADER if leader else WORKER, spec=spec, record=record, claim=claim, revision=revision)
    if not leader:
        owner = data.draw(mostly(*reversed(world.statefulset_uids), None), label="worker's StatefulSet")
        if owner is not None:
            body["metadata"]["ownerReferences"] = controller_of("StatefulSet", LEADER, owner)
    return body


# --- the rules, read off the API as it is at the answer ------------------------------------------------


def current_lws(api: MemoryApi) -> Object | None:
    return api.peek(keys.LWS_PLURAL, NS, LWS)


def opted_in_now(api: MemoryApi, pod: Object) -> bool:
    """The LeaderWorkerSet opted in, or upstream recorded the pod's revision of it stamped."""
    lws = current_lws(api)
    if lws is None:
        return False
    if opted_in(lws["metadata"]["annotations"].get(keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION)):
        return True
    revision = pod["metadata"]["labels"].get(keys.LWS_TEMPLATE_REVISION_HASH_LABEL)
    return revision is not None and any(
        found["metadata"]["labels"].get(keys.LWS_TEMPLATE_REVISION_HASH_LABEL) == revision
        and found["metadata"]["ownerReferences"][0]["uid"] == uid_of(lws)
        and found["data"]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"].get("annotations")
        for found in api.view("controllerrevisions")
    )


def current_leader_domain(api: MemoryApi, worker: Object) -> tuple[bool, str | None]:
    """(whether the worker may join its leader: the leader is its current live incarnation, as upstream ties them by
    uid, and was stamped for the replica scope or was given a domain; and the domain that leader was given: its
    record when it is a name of group 0 and agrees with the claim it holds)."""
    leader = api.peek("pods", NS, LEADER)
    if leader is None or leader["metadata"].get("deletionTimestamp"):
        return False, None
    if leader["status"]["phase"] in ("Succeeded", "Failed"):
        return False, None
    owners = worker["metadata"].get("ownerReferences")
    if owners:
        statefulset = api.peek("statefulsets", NS, LEADER)
        if statefulset is None or uid_of(statefulset) != owners[0]["uid"]:
            return False, None
        leader_refs = statefulset["metadata"].get("ownerReferences")
        if leader_refs and leader_refs[0]["uid"] != uid_of(leader):
            return False, None
    record = leader["metadata"]["annotations"].get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    claims = leader["spec"].get("resourceClaims") or []
    held = claims[0]["resourceClaimTemplateName"] if claims else None
    if record is None and held is None:
        return keys.SCOPE_LABEL in leader["metadata"]["labels"], None
    if record in OWN_DOMAINS and held in (None, names.claim_template_name(record)):
        return True, record
    return False, None


@settings.PURE_SEARCH
@given(st.data())
def test_the_replica_pod_webhook_keeps_the_promise_in_any_world(data: st.DataObject) -> None:
    world = World(api=MemoryApi())
    build_lws(world, data)
    build_group(world, data)
    build_domains(world, data)
    stores = fed(state.Stores(), world.api, data)
    pod = pod_to_admit(world, data)
    api = world.api

    answered = answer(
        pod, pod_admission.admit_pod(api.client(keys.LWS_CONTROLLER), stores, copy.deepcopy(pod), token=TOKEN)
    )

    is_leader = pod["metadata"]["name"] == LEADER
    role = "leader" if is_leader else "worker"
    if answered is None:
        event(f"{role} refused")
        # A pod carrying a record or a channel claim of its own is refused when the stores still say its
        # LeaderWorkerSet opted in (it did, a moment ago); one made from a plain template never is.
        as_made = keys.COMPUTE_DOMAIN_NAME_ANNOTATION not in pod["metadata"]["annotations"] and not pod["spec"].get(
            "resourceClaims"
        )
        assert not (is_leader and as_made and current_lws(api) is not None and not opted_in_now(api, pod)), (
            "a leader of a LeaderWorkerSet that did not opt in was refused"
        )
        return
    admitted, account = answered
    domain_name = account.domain
    if domain_name is not None:
        assert admitted["metadata"]["annotations"].get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION) == domain_name
    if is_leader:
        if opted_in_now(api, pod):
            assert domain_name is not None, "a leader of an opted-in LeaderWorkerSet was admitted without a domain"
            assert re.fullmatch(f"{LWS}-0-[a-z0-9]{{5}}", domain_name), f"a leader joins {domain_name}, not its group's"
    else:
        current, given_domain = current_leader_domain(api, pod)
        assert current, "a worker was admitted though its leader is not its current live, stamped incarnation"
        assert domain_name == given_domain, (
            f"a worker joins {domain_name}, its leader was given {given_domain}: one group, two domains"
        )
        assert not (domain_name is None and opted_in_now(api, pod)), (
            "a worker of an opted-in workload was admitted without a domain (its leader has none)"
        )
    event(
        f"{role} admitted {'onto a domain, ' + ('gated' if account.gated else 'at once') if domain_name else 'alone'}"
    )
    if domain_name is None:
        assert not account.patch, "a pod that joins no domain was changed"
        return
    gated = is_gated(admitted)
    assert gated == account.gated
    domain = api.peek(keys.COMPUTE_DOMAIN_PLURAL, NS, domain_name)
    assert domain is None or not leaving(domain), f"a pod was admitted onto {domain_name}, which is going"
    assert holds_channel_claim(admitted, domain_name), f"a GPU container lacks the channel claim of {domain_name}"
    template = names.claim_template_name(domain_name)
    if not gated:
        # Ours, alive, with its claim template: for the LeaderWorkerSet of that name that exists, or for an
        # earlier one while the stores still hold it (its pods, like this one, keep it until they end).
        assert domain is not None, f"a pod runs at once on {domain_name}, which does not exist"
        assert made_by(domain, keys.LWS_CONTROLLER, LWS), f"a pod runs at once on {domain_name}, which is not ours"
        assert api.peek("resourceclaimtemplates", NS, template) is not None
        return
    lws = current_lws(api)
    ready = domain is not None and lws is not None and made_by(domain, keys.LWS_CONTROLLER, LWS, uid_of(lws))
    # Liveness: the stores know the template (else the gate waits for them), and the domain is ready for the
    # LeaderWorkerSet that exists, whatever the stores hold of it: a worker joining it runs at once.
    assert not (ready and not is_leader and stores.shared.template_exists(NS, template)), (
        f"a worker joining {domain_name}, ready for its LeaderWorkerSet, is held by the gate"
    )


@settings.FOCUSED_SEARCH
@given(st.data())
def test_a_worker_of_a_leader_given_no_domain_runs_alone_only_when_nothing_opted_in(data: st.DataObject) -> None:
    """The worker binding's rarest branch, searched on its own: the worker's current, live leader was given no
    domain (admitted while the gate was off or its workload was not opted in, or made from a template without the
    scope). The worker runs alone only when that leader carries the scope and nothing opted in (the workload now, or
    the worker's revision); otherwise it waits, or it would run without the channel it was stamped for."""
    world = World(api=MemoryApi())
    build_lws(world, data)
    scoped = data.draw(st.booleans(), label="leader stamped for the replica scope")
    leader = pod_body(LEADER, spec=pods.cpu_leader_spec(), record=None, claim=None, revision=None, scoped=scoped)
    leader["status"] = {"phase": "Running"}
    leader_uid = uid_of(world.api.put("pods", leader, manager="kubelet"))
    statefulset = {
        "metadata": {"name": LEADER, "namespace": NS, "ownerReferences": controller_of("Pod", LEADER, leader_uid)}
    }
    statefulset_uid = uid_of(world.api.put("statefulsets", statefulset, manager="lws"))
    build_domains(world, data)
    stores = fed(state.Stores(), world.api, data)
    revision = data.draw(st.sampled_from((None, REVISION)), label="worker's revision")
    worker = pod_body(WORKER, spec=pods.deepseek_worker_spec(), record=None, claim=None, revision=revision)
    worker["metadata"]["ownerReferences"] = controller_of("StatefulSet", LEADER, statefulset_uid)

    answered = answer(
        worker,
        pod_admission.admit_pod(world.api.client(keys.LWS_CONTROLLER), stores, copy.deepcopy(worker), token=TOKEN),
    )

    if answered is None:
        event("worker waits")
        return
    admitted, account = answered
    assert scoped, "a worker of a leader made without the scope was admitted: it runs without its channel"
    assert account.domain is None, f"a worker of a leader given no domain joined {account.domain}"
    assert admitted == worker, "a worker of a leader given no domain was changed"
    assert not opted_in_now(world.api, worker), "a worker of an opted-in workload was admitted without a domain"
    event("worker admitted alone")
