"""What each layer of mnnvl-guardian promises on its own, over arbitrary input: its planner (`planner.decide`), whatever
facts it is handed, and its stores, whatever domains their watch delivers.

The guardian model (`test_guardian_interleavings.py`) judges the layers together, where one layer's check hides the
removal of another's (the planner sees only what the stores let in; the executor releases only after its own fresh
pod list). Each layer keeps its promise without the others, so that a later change to one does not lean on a check
the next one happens to make: the planner protects and releases only domains managed by mnnvl (by identity), and
releases only a deleting, protected domain no pod uses, with the gate on; the stores hold no domain that is not
managed by mnnvl. The rules are written out here, from the labels and `managedFields`.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mnnvl_api import keys
from mnnvl_api.decisions import domains
from mnnvl_guardian import planner, state

from ..mnnvl_runtime.memory_api import Object
from . import settings

NS = "serving"
MANAGERS = (keys.LWS_CONTROLLER, keys.DS_CONTROLLER, "kubectl", None)


def managed_by_mnnvl(managed_by: str | None, owner_uid: str | None, created_by: str | None) -> bool:
    """An mnnvl scope controller's label, an owner, and the API server's record that the labelled controller alone
    wrote the identity."""
    return managed_by in keys.DOMAIN_MANAGERS and owner_uid is not None and created_by == managed_by


FACTS = st.builds(
    domains.DomainFacts,
    name=st.just("d"),
    namespace=st.just(NS),
    owner_uid=st.sampled_from(("uid-w", None)),
    managed_by=st.sampled_from(MANAGERS),
    workload=st.just("w"),
    claim_template=st.just("d-channel"),
    deleting=st.booleans(),
    protected=st.booleans(),
    condemned=st.booleans(),
    created_by=st.sampled_from(MANAGERS),
)


@settings.PURE_SEARCH
@given(FACTS, st.booleans(), st.booleans())
def test_the_guardian_planner_acts_only_on_managed_domains_and_releases_only_unused_ones(
    domain: domains.DomainFacts, template_in_use: bool, gate_enabled: bool
) -> None:
    action = planner.decide(domain, template_in_use=template_in_use, gate_enabled=gate_enabled)
    managed = managed_by_mnnvl(domain.managed_by, domain.owner_uid, domain.created_by)
    if not managed:
        assert action is planner.Action.NOTHING, f"{action} on a domain mnnvl does not manage"
        return
    if action is planner.Action.RELEASE:
        assert domain.deleting, "released a live domain"
        assert not template_in_use, "released a domain a pod uses"
        assert gate_enabled, "released with the gate off"
    if action is planner.Action.PROTECT:
        assert not domain.deleting, "a finalizer cannot be added to a domain being deleted"
    # and it does its job: an unprotected live domain is protected, an unused deleting one let go
    if not domain.deleting and not domain.protected:
        assert action is planner.Action.PROTECT
    if domain.deleting and domain.protected and not template_in_use and gate_enabled:
        assert action is planner.Action.RELEASE


def domain_body(uid: str, labels: dict[str, str], writers: list[str], *, version: int) -> Object:
    """A domain as the API server returns it at `version`: each of `writers` recorded as owning every label."""
    owned: Object = {f"f:{key}": {} for key in labels}
    return {
        "metadata": {
            "name": f"d-{uid}",
            "namespace": NS,
            "uid": uid,
            "resourceVersion": str(version),
            "labels": labels,
            "managedFields": [
                {"manager": writer, "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": owned}}}
                for writer in writers
            ],
        },
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"d-{uid}-channel"}}},
    }


DOMAIN_EVENT = st.tuples(
    st.sampled_from(("uid-1", "uid-2", "uid-3")),
    st.sampled_from((keys.LWS_CONTROLLER, keys.DS_CONTROLLER, "kubectl")),  # its managed-by label
    st.booleans(),  # with an owner label
    st.lists(st.sampled_from((keys.LWS_CONTROLLER, keys.DS_CONTROLLER, "kubectl")), min_size=1, max_size=2),
    st.booleans(),  # deleted
)


@settings.PURE_SEARCH
@given(st.lists(DOMAIN_EVENT, max_size=8))
def test_the_guardian_stores_hold_only_managed_domains(
    events: list[tuple[str, str, bool, list[str], bool]],
) -> None:
    stores = state.Stores()
    for version, (uid, managed_by, owned, writers, deleted) in enumerate(events, start=1):
        labels = {keys.MANAGED_BY_LABEL: managed_by}
        if owned:
            labels[keys.OWNER_UID_LABEL] = "uid-w"
        stores.domain_mirror.observe(domain_body(uid, labels, writers, version=version), deleted=deleted)
    for _, name in stores.domain_keys():
        uid, managed_by, owned, writers, _ = next(event for event in reversed(events) if f"d-{event[0]}" == name)
        sole_writer = writers[0] if len(set(writers)) == 1 else None
        assert managed_by_mnnvl(managed_by, "uid-w" if owned else None, sole_writer), (
            f"the guardian's stores hold {name}, which mnnvl does not manage (labelled {managed_by}, written by {writers})"
        )
