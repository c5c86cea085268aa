"""The slice scope's webhooks over arbitrary worlds: `mnnvl_ds.slice_admission.admit_pod` (a pod of a child
LeaderWorkerSet) and `slice_admission.child_errors` (a child LeaderWorkerSet created or scaled).

As `test_replica_admission.py` does for the replica scope, this asks the webhooks about any pod or child a user or a
stale controller could write, against any history of what they read: DisaggregatedSets deleted and recreated
under one name, opted in or out; child LeaderWorkerSets of several incarnations, stamped for the slice scope or
not, controlled by this set, an earlier one, or one of another name; domains made by us or by others, condemned or
being deleted; the gate on or off; and watch stores with any lag or loss. The answer is judged against the API at
that moment, by rules written here:

- a pod belongs to the slice scope when its LeaderWorkerSet, as it exists, is stamped for it and controlled by the
  DisaggregatedSet its labels name, as that set exists; such a pod is admitted only onto its (slice, revision)'s
  domain, with the channel claim in every GPU container, never onto a domain that is going, and runs at once only
  on a domain of ours; any other pod is left alone;
- with the gate off, a pod of a role its set enrolls is refused (it would run without the channel), any other is
  left alone; a child of an enrolled role is neither created nor scaled up;
- a child whose domain name another holds (not made by us for its set) is neither created nor scaled up;
- nothing else is refused: not a pod of the slice scope without a cause, not a plain child, not a scale-down.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses

from hypothesis import event, given
from hypothesis import strategies as st

from mnnvl_api import keys, names
from mnnvl_ds import planner, slice_admission, state

from ..mnnvl_api import pods
from ..mnnvl_runtime.memory_api import MemoryApi, Object
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

DS = "llm"
ROLE = "prefill"
#: The (slice, revision) positions a child may take; the child's name stays one (upstream names it by position,
#: but a recreated set reuses names, and a store may hold an earlier incarnation under it).
POSITIONS = ((0, "aaaaaaaa"), (1, "aaaaaaaa"), (0, "bbbbbbbb"))
CHILD = f"{DS}-0-aaaaaaaa-{ROLE}"
POD = f"{CHILD}-0"
OPT_IN = st.sampled_from((keys.OPT_IN_ENABLED, keys.OPT_IN_DISABLED, None))


def ds_body(opt_in: str | None) -> Object:
    annotations = {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: opt_in} if opt_in is not None else {}
    template: Object = {"metadata": {}, "spec": {"containers": [copy.deepcopy(pods.VLLM)]}}
    return {
        "metadata": {"name": DS, "namespace": NS, "annotations": annotations},
        "spec": {
            "slices": 2,
            "roles": [{"name": ROLE, "spec": {"leaderWorkerTemplate": {"leaderTemplate": template}}}],
        },
    }


def position_labels(ds: str, position: tuple[int, str]) -> dict[str, str]:
    return {
        keys.DS_NAME_LABEL: ds,
        keys.DS_SLICE_LABEL: str(position[0]),
        keys.DS_REVISION_LABEL: position[1],
        keys.DS_ROLE_LABEL: ROLE,
    }


@dataclasses.dataclass
class World:
    api: MemoryApi
    gate_enabled: bool = True
    ds_uids: list[str] = dataclasses.field(default_factory=list)


def child_body(world: World, data: st.DataObject, *, replicas: int = 1) -> Object:
    """A child LeaderWorkerSet as upstream makes it for the set as it is, or as anyone could write one."""
    position = data.draw(mostly(*POSITIONS), label="child's position")
    labels = position_labels(data.draw(mostly(DS, "other"), label="child's set label"), position)
    meta: Object = {"name": CHILD, "namespace": NS, "labels": labels}
    if world.ds_uids:
        owner = data.draw(st.sampled_from(world.ds_uids), label="child's controller")
        named = data.draw(mostly(DS, "other"), label="controller's name")
        meta["ownerReferences"] = controller_of(keys.DS_KIND, named, owner, api_version=keys.DS_API_VERSION)
    stamped = data.draw(mostly(True, False), label="child stamped")
    template: Object = {"metadata": {"labels": {keys.SCOPE_LABEL: keys.SCOPE_SLICE} if stamped else {}}}
    return {"metadata": meta, "spec": {"replicas": replicas, "leaderWorkerTemplate": {"leaderTemplate": template}}}


def build(world: World, data: st.DataObject) -> None:
    """Incarnations of the set and of its child (each deleted before the next; the last of each may be gone too),
    and the domains of every position."""
    values = data.draw(st.lists(OPT_IN, max_size=2), label="earlier DisaggregatedSets")
    values.append(data.draw(mostly(keys.OPT_IN_ENABLED, keys.OPT_IN_DISABLED, None), label="DisaggregatedSet"))
    for index, value in enumerate(values):
        if index:
            world.api.delete(keys.DS_PLURAL, NS, DS)
        world.ds_uids.append(uid_of(world.api.put(keys.DS_PLURAL, ds_body(value), manager="kubectl")))
    if data.draw(settings.RARELY, label="DisaggregatedSet gone"):
        world.api.delete(keys.DS_PLURAL, NS, DS)
    for index in range(data.draw(st.sampled_from((1, 2, 2, 0)), label="child incarnations")):
        if index:
            world.api.delete(keys.LWS_PLURAL, NS, CHILD)
        world.api.put(keys.LWS_PLURAL, child_body(world, data), manager="lws")
    for position in POSITIONS:
        if data.draw(mostly(position == POSITIONS[0], position != POSITIONS[0]), label=f"{position} has a domain"):
            owner = data.draw(mostly(*reversed(world.ds_uids)), label="domain's owner")
            labels = planner.domain_labels(planner.DisaggregatedSetFacts(namespace=NS, name=DS, uid=owner), position)
            put_domain(world.api, names.slice_domain_name(DS, *position), labels, data, ours=keys.DS_CONTROLLER)


def pod_to_admit(world: World, data: st.DataObject) -> Object:
    """A pod of the child: mostly as upstream makes it from the child that exists (its labels copied), else with
    labels of another position or stamp (a pod of an earlier incarnation, or made by hand); perhaps with a record
    or a claim of its own."""
    child = world.api.peek(keys.LWS_PLURAL, NS, CHILD)
    if child is not None and data.draw(mostly(True, False), label="pod as its child makes it"):
        labels = dict(child["metadata"]["labels"])
        if stamped(child):
            labels[keys.SCOPE_LABEL] = keys.SCOPE_SLICE
    else:
        labels = position_labels(DS, data.draw(st.sampled_from(POSITIONS), label="pod's position"))
        if data.draw(st.booleans(), label="pod stamped"):
            labels[keys.SCOPE_LABEL] = keys.SCOPE_SLICE
    labels[keys.LWS_NAME_LABEL] = CHILD
    annotations = {}
    record = data.draw(mostly(None, *(names.slice_domain_name(DS, *p) for p in POSITIONS)), label="pod's record")
    if record is not None:
        annotations[keys.COMPUTE_DOMAIN_NAME_ANNOTATION] = record
    body: Object = {
        "metadata": {"name": POD, "namespace": NS, "labels": labels, "annotations": annotations},
        "spec": data.draw(mostly(pods.deepseek_worker_spec(), pods.cpu_leader_spec()), label="pod's spec"),
    }
    if data.draw(settings.RARELY, label="pod brings a channel claim of its own"):
        body["spec"]["resourceClaims"] = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": THEIRS}]
    return body


# --- the rules, read off the API as it is at the answer ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Truth:
    """What the API says of a child LeaderWorkerSet (`CHILD` as stored, or one being written)."""

    #: Stamped for the slice scope and controlled (by name and uid) by the DisaggregatedSet its labels name, which
    #: exists: its pods join its (slice, revision)'s domain.
    belongs: bool
    #: That set enrolls its role in the slice domain now.
    enrolled: bool
    #: Its (slice, revision)'s domain.
    domain: str


def stamped(child: Object | None) -> bool:
    """The LeaderWorkerSet's templates carry the slice scope's stamp."""
    return child is not None and bool(child["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"])


def made_from(pod: Object, child: Object | None) -> bool:
    """The pod carries the position labels and the stamp of `child`, as upstream copies them onto its pods (a pod
    of an earlier incarnation, made late by its StatefulSet, carries that one's)."""
    keys_copied = (keys.DS_NAME_LABEL, keys.DS_SLICE_LABEL, keys.DS_REVISION_LABEL, keys.DS_ROLE_LABEL)
    labels = pod["metadata"]["labels"]
    return (
        child is not None
        and all(labels.get(key) == child["metadata"]["labels"].get(key) for key in keys_copied)
        and (labels.get(keys.SCOPE_LABEL) == keys.SCOPE_SLICE) == stamped(child)
    )


def truth_of(api: MemoryApi, child: Object) -> Truth:
    meta = child["metadata"]
    labels = meta["labels"]
    domain = names.slice_domain_name(
        labels[keys.DS_NAME_LABEL], int(labels[keys.DS_SLICE_LABEL]), labels[keys.DS_REVISION_LABEL]
    )
    ds = api.peek(keys.DS_PLURAL, NS, DS)
    references = meta.get("ownerReferences") or []
    belongs = (
        stamped(child)
        and ds is not None
        and labels[keys.DS_NAME_LABEL] == DS
        and bool(references)
        and references[0]["name"] == DS
        and references[0]["uid"] == uid_of(ds)
    )
    enrolled = (
        belongs
        and ds is not None
        and ds["metadata"]["annotations"].get(keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION) == keys.OPT_IN_ENABLED
    )
    return Truth(belongs=belongs, enrolled=enrolled, domain=domain)


@settings.PURE_SEARCH
@given(st.data())
def test_the_slice_pod_webhook_keeps_the_promise_in_any_world(data: st.DataObject) -> None:
    world = World(api=MemoryApi(), gate_enabled=not data.draw(settings.RARELY, label="gate off"))
    build(world, data)
    stores = fed(state.Stores(), world.api, data)
    pod = pod_to_admit(world, data)
    api = world.api
    client = api.client(keys.DS_CONTROLLER)

    answered = answer(
        pod, slice_admission.admit_pod(client, stores, copy.deepcopy(pod), gate_enabled=world.gate_enabled)
    )

    child = api.peek(keys.LWS_PLURAL, NS, CHILD)
    truth = truth_of(api, child) if child is not None else None
    # The domains the pod may join: its LeaderWorkerSet's when that is stamped (while the stores still hold a set
    # that is gone, gated); and, for a pod whose own labels say it is stamped (one made by hand, or while the
    # stores hold an earlier incarnation of its LeaderWorkerSet that agrees with them), the one its labels name.
    labels = pod["metadata"]["labels"]
    joinable = {truth.domain} if truth is not None and stamped(child) else set()
    if labels.get(keys.SCOPE_LABEL) == keys.SCOPE_SLICE:
        joinable.add(names.slice_domain_name(DS, int(labels[keys.DS_SLICE_LABEL]), labels[keys.DS_REVISION_LABEL]))
    if answered is None:
        event("refused")
        if truth is None or (not world.gate_enabled and truth.enrolled):
            return  # no LeaderWorkerSet to tell (retried), or the gate is off for an enrolled role
        record = pod["metadata"]["annotations"].get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
        going = [api.peek(keys.COMPUTE_DOMAIN_PLURAL, NS, name) for name in joinable]
        causes = [
            any(domain is not None and leaving(domain) for domain in going),
            bool(joinable) and record is not None and (record not in joinable or len(joinable) > 1),
            bool(joinable) and bool(pod["spec"].get("resourceClaims")),
            # stamped, yet controlled by a set that is gone or is another: an orphan about to be collected
            stamped(child) and not truth.belongs,
        ]
        assert any(causes), "a pod was refused without cause"
        return
    admitted, account = answered
    assert truth is not None, "a pod was admitted though its LeaderWorkerSet does not exist"
    if not world.gate_enabled:
        event("admitted with the gate off")
        assert not truth.enrolled, "with the gate off, a pod of an enrolled role was admitted without the channel"
        assert not account.patch, "with the gate off, a pod was changed"
        return
    if account.domain is None:
        event("admitted alone")
        assert not truth.belongs, "a pod of the slice scope was admitted without its claim"
        assert not account.patch, "a pod that joins no domain was changed"
        return
    event(f"admitted onto its domain, {'gated' if account.gated else 'at once'}")
    if truth.belongs and made_from(pod, child):
        assert account.domain == truth.domain, f"a pod joins {account.domain}, not its slice's {truth.domain}"
    assert account.domain in joinable, f"a pod was given {account.domain}, which neither it nor its set names"
    assert admitted["metadata"]["annotations"].get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION) == account.domain
    assert is_gated(admitted) == account.gated
    domain = api.peek(keys.COMPUTE_DOMAIN_PLURAL, NS, account.domain)
    assert domain is None or not leaving(domain), f"a pod was admitted onto {account.domain}, which is going"
    assert holds_channel_claim(admitted, account.domain), f"a GPU container lacks the channel claim of {account.domain}"
    if not account.gated:
        assert domain is not None, f"a pod runs at once on {account.domain}, which does not exist"
        assert made_by(domain, keys.DS_CONTROLLER, DS), f"a pod runs at once on {account.domain}, which is not ours"
        if made_from(pod, child):
            controller = (child or {})["metadata"].get("ownerReferences") or [{}]
            assert made_by(domain, keys.DS_CONTROLLER, DS, controller[0].get("uid")), (
                f"a pod runs at once on {account.domain}, made for another DisaggregatedSet than its LeaderWorkerSet's"
            )
        template = names.claim_template_name(account.domain)
        assert api.peek("resourceclaimtemplates", NS, template) is not None


@settings.PURE_SEARCH
@given(st.data())
def test_the_slice_child_webhook_keeps_the_promise_in_any_world(data: st.DataObject) -> None:
    world = World(api=MemoryApi(), gate_enabled=not data.draw(settings.RARELY, label="gate off"))
    build(world, data)
    api = world.api
    stored = api.get(keys.LWS_PLURAL, NS, CHILD)
    growing = data.draw(mostly(True, False), label="more replicas")
    if stored is not None and data.draw(st.booleans(), label="an update of the stored child"):
        old: Object | None = stored
        lws = copy.deepcopy(stored)
        lws["spec"]["replicas"] = stored["spec"]["replicas"] + (1 if growing else -1)
    else:
        old, lws = None, child_body(world, data)
    client = api.client(keys.DS_CONTROLLER)

    found = asyncio.run(slice_admission.child_errors(client, lws, old, gate_enabled=world.gate_enabled))

    truth = truth_of(api, lws)
    adds = old is None or growing
    references = lws["metadata"].get("ownerReferences") or []
    domain = api.peek(keys.COMPUTE_DOMAIN_PLURAL, NS, truth.domain)
    held_by_another = (
        domain is not None and bool(references) and not made_by(domain, keys.DS_CONTROLLER, DS, references[0]["uid"])
    )
    refusable = (
        adds
        and stamped(lws)
        and bool(references)
        and references[0]["name"] == lws["metadata"]["labels"][keys.DS_NAME_LABEL]
    )
    event(f"{'refused' if found else 'allowed'}")
    if not world.gate_enabled and refusable and truth.enrolled:
        assert found, "with the gate off, an enrolled role's child was created or scaled up"
    elif world.gate_enabled and refusable and held_by_another:
        assert found, f"a child was created or scaled up while {truth.domain} is held by another"
    else:
        assert not found, f"a child was refused without cause: {found}"
