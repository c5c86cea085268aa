"""Nothing foreign passes for ours: any sequence of ComputeDomain writes, by our controller's user or anyone else,
each naming any field manager, through the API server (which records the request's manager in `managedFields`
before admission) and the scope controller's identity webhook (`admission.refuse_impersonation`).

A domain is ours when the API server records our field manager as the one owner of its identity labels
(`domains.identity_owner`). The property: whenever a domain passes for mnnvl-lws's, every write the API server let
through as field manager mnnvl-lws came from mnnvl-lws's own user; and our own user is never refused.
"""

from __future__ import annotations

import asyncio
import copy

import kopf
from hypothesis import event, given
from hypothesis import strategies as st

from mnnvl_api import keys
from mnnvl_api.decisions import domains
from mnnvl_runtime import admission

from ..mnnvl_runtime.memory_api import MemoryApi, Object
from ..mnnvl_runtime.test_domain_identity import Reviews
from . import settings
from .worlds import NS, mostly

NAME = "w-0-x7k2b"
OURS = "system:serviceaccount:mnnvl-system:mnnvl-lws"
USERS = (OURS, "alice")
MANAGERS = (keys.LWS_CONTROLLER, "kubectl", keys.DS_CONTROLLER)
IDENTITY = {keys.OWNER_UID_LABEL: "uid-w", keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER}
#: One write: (its user, the field manager it names, create or relabel).
WRITE = st.tuples(mostly(*USERS), st.sampled_from(MANAGERS), st.sampled_from(("create", "relabel", "delete")))


def owns_identity(domain: Object, manager: str) -> bool:
    """`manager` already owns every identity label, with its value: applying them again changes nothing, and the
    API server does not write the object (nor its managedFields)."""
    meta = domain["metadata"]
    owned = {
        key
        for entry in meta["managedFields"]
        if entry["manager"] == manager
        for key in entry["fieldsV1"]["f:metadata"]["f:labels"]
    }
    return all(meta["labels"].get(key) == value and f"f:{key}" in owned for key, value in IDENTITY.items())


def written(api: MemoryApi, manager: str, kind: str) -> Object | None:
    """The domain after `manager`'s write of `kind` on `api` (None: the write does not apply now)."""
    current = api.peek(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
    if kind == "create" and current is None:
        body: Object = {"metadata": {"name": NAME, "namespace": NS, "labels": dict(IDENTITY)}, "spec": {}}
        return api.put(keys.COMPUTE_DOMAIN_PLURAL, body, manager=manager)
    if kind == "relabel" and current is not None and not owns_identity(current, manager):
        return api.apply_labels(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME, IDENTITY, manager=manager)
    return None


@settings.PURE_SEARCH
@given(st.lists(WRITE, min_size=1, max_size=5))
def test_only_our_own_user_writes_a_domain_that_passes_for_ours(writes: list[tuple[str, str, str]]) -> None:
    api = MemoryApi()
    own = admission.OwnUser()
    reviews = Reviews(OURS)
    as_ours_by: list[str] = []  # the users of the writes let through as field manager mnnvl-lws
    for user, manager, kind in writes:
        if kind == "delete":
            if api.peek(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME) is not None:
                api.delete(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
                as_ours_by.clear()
            continue
        old = api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
        trial = copy.deepcopy(api)
        body = written(trial, manager, kind)
        if body is None:
            continue
        try:
            asyncio.run(
                admission.refuse_impersonation(
                    keys.LWS_CONTROLLER,
                    reviews,
                    own,
                    operation="CREATE" if old is None else "UPDATE",
                    requester=user,
                    body=body,
                    old=old,
                )
            )
        except kopf.AdmissionError:
            event("refused")
            assert user != OURS, "our own user was refused"
            continue
        api = trial
        if manager == keys.LWS_CONTROLLER:
            as_ours_by.append(user)
        domain = api.peek(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
        assert domain is not None
        if domains.identity_owner(domain["metadata"]) == keys.LWS_CONTROLLER:
            event("passes for ours")
            assert set(as_ours_by) == {OURS}, f"a domain passes for ours after writes as mnnvl-lws by {as_ours_by}"
