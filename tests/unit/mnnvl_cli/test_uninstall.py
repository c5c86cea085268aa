"""`kubectl mnnvl uninstall-check`: what uninstalling mnnvl would leave behind (pure, on plain objects), and the
command's output and exit code."""

from __future__ import annotations

import copy
from collections.abc import Collection, Sequence
from typing import Any

from mnnvl_api import keys
from mnnvl_cli import uninstall

from ..mnnvl_api.domain_builders import UID
from . import objects

EVERYTHING = uninstall.CONTROLLERS
GONE = "6f1c1e0a-0000-4000-8000-00000000dead"


def left(
    *,
    compute_domains: Sequence[dict[str, Any]] = (),
    pods: Sequence[dict[str, Any]] = (),
    leaderworkersets: Sequence[dict[str, Any]] = (),
    disaggregatedsets: Sequence[dict[str, Any]] = (),
    uninstalling: Collection[str] = EVERYTHING,
) -> dict[tuple[str, str], uninstall.Leftover]:
    found = uninstall.leftovers(
        compute_domains=compute_domains,
        pods=pods,
        leaderworkersets=leaderworkersets,
        disaggregatedsets=disaggregatedsets,
        uninstalling=uninstalling,
    )
    return {(o.kind, o.name): o for o in found}


def stamped_lws(name: str = "deepseek-r1", *, uid: str = UID) -> dict[str, Any]:
    """An opted-in LeaderWorkerSet as mnnvl-lws stamped it (worker template only)."""
    lws = objects.lws(name, uid=uid)
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"] = {
        "metadata": {
            "labels": {keys.SCOPE_LABEL: keys.SCOPE_REPLICA},
            "annotations": {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: name},
        },
        "spec": {"containers": []},
    }
    return lws


def stamped_ds(scope: str = keys.SCOPE_SLICE) -> dict[str, Any]:
    """llm-serving with its prefill role's worker template stamped for `scope`."""
    ds = objects.ds()
    ds["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["workerTemplate"] = {
        "metadata": {"labels": {keys.SCOPE_LABEL: scope}},
        "spec": {"containers": []},
    }
    return ds


def test_nothing_of_mnnvl_leaves_nothing_behind() -> None:
    plain = objects.lws("plain", opt_in=None)
    plain["spec"]["leaderWorkerTemplate"]["workerTemplate"] = {"metadata": {"labels": {"app": "x"}}, "spec": {}}
    found = left(
        compute_domains=[objects.foreign_domain("by-hand")],
        pods=[objects.pod("running-0", domain="x-0-bcdfg"), objects.pod("plain-0", scope=None)],
        leaderworkersets=[plain],
        disaggregatedsets=[objects.ds()],
    )
    assert found == {}
    assert uninstall.exit_code([]) == 0


def test_a_managed_domain_is_left_and_the_fix_names_its_workload() -> None:
    found = left(
        compute_domains=[objects.domain("deepseek-r1-0-bcdfg")],
        leaderworkersets=[objects.lws()],
        pods=[objects.pod("deepseek-r1-0", domain="deepseek-r1-0-bcdfg")],
    )
    domain = found[(keys.COMPUTE_DOMAIN_KIND, "deepseek-r1-0-bcdfg")]
    assert domain.namespace == objects.NS
    assert keys.LWS_CONTROLLER in domain.why
    assert "protection finalizer" in domain.why
    assert domain.fix == "delete lws/deepseek-r1 and wait until mnnvl has deleted this domain"


def test_a_domain_whose_workload_is_gone_is_left_for_gc_and_a_deleting_one_for_its_users() -> None:
    found = left(
        compute_domains=[
            objects.domain("orphan-0-bcdfg", owner_uid=GONE),
            objects.domain("going-0-bcdfg", owner_uid=GONE, deleting=True),
            objects.domain("unused-0-bcdfg", owner_uid=GONE, deleting=True),
        ],
        pods=[objects.pod("user-0", domain="going-0-bcdfg")],
    )
    assert "kubectl mnnvl gc --apply" in found[(keys.COMPUTE_DOMAIN_KIND, "orphan-0-bcdfg")].fix
    assert "(user-0)" in found[(keys.COMPUTE_DOMAIN_KIND, "going-0-bcdfg")].fix
    assert "wait until mnnvl-guardian" in found[(keys.COMPUTE_DOMAIN_KIND, "unused-0-bcdfg")].fix


def test_a_look_alike_domain_counts_only_for_the_finalizer_it_carries() -> None:
    look_alike = objects.domain("look-alike", created_by="kubectl")  # our labels, written by a user
    unheld = copy.deepcopy(look_alike)
    unheld["metadata"]["finalizers"] = []
    found = left(compute_domains=[look_alike, unheld])
    [(kind, name)] = found
    assert (kind, name) == (keys.COMPUTE_DOMAIN_KIND, "look-alike")
    assert "made by" not in found[(kind, name)].why
    assert "protection finalizer" in found[(kind, name)].why
    assert left(compute_domains=[look_alike], uninstalling=[keys.LWS_CONTROLLER]) == {}


def test_domains_count_only_for_the_controllers_being_uninstalled() -> None:
    slice_domain = objects.domain("llm-serving-0-bcdfg", manager=keys.DS_CONTROLLER, owner_uid=objects.DS_UID)
    slice_domain["metadata"]["finalizers"] = []  # the guardian has not protected it yet
    replica_domain = objects.domain("deepseek-r1-0-bcdfg")
    both = [slice_domain, replica_domain]
    assert set(left(compute_domains=both, uninstalling=[keys.DS_CONTROLLER])) == {
        (keys.COMPUTE_DOMAIN_KIND, "llm-serving-0-bcdfg")
    }
    # The guardian alone: only what carries its finalizer.
    assert set(left(compute_domains=both, uninstalling=[keys.GUARDIAN_CONTROLLER])) == {
        (keys.COMPUTE_DOMAIN_KIND, "deepseek-r1-0-bcdfg")
    }


def test_a_gated_pod_is_left_while_the_controller_that_lifts_its_gate_goes() -> None:
    gated = objects.pod("deepseek-r1-0", domain="deepseek-r1-0-bcdfg", gated=True)
    found = left(pods=[gated])
    pod = found[("Pod", "deepseek-r1-0")]
    for named in (keys.SCHEDULING_GATE, keys.LWS_CONTROLLER, "deepseek-r1-0-bcdfg"):
        assert named in pod.why
    assert "delete its workload" in pod.fix
    assert left(pods=[gated], uninstalling=[keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER]) == {}
    slice_pod = objects.pod("llm-serving-0", gated=True, scope=keys.SCOPE_SLICE)
    assert set(left(pods=[slice_pod], uninstalling=[keys.DS_CONTROLLER])) == {("Pod", "llm-serving-0")}


def test_an_ungated_or_finished_pod_is_not_left() -> None:
    finished = objects.pod("done-0", gated=True, phase="Succeeded")
    finished["status"]["phase"] = "Succeeded"
    assert left(pods=[objects.pod("running-0"), finished]) == {}


def test_a_stamped_leaderworkerset_is_left_with_its_opt_out() -> None:
    found = left(leaderworkersets=[stamped_lws()])
    lws = found[("LeaderWorkerSet", "deepseek-r1")]
    assert "workerTemplate (replica)" in lws.why
    assert "neither the channel claim nor the gate" in lws.why
    assert keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION in lws.fix
    assert left(leaderworkersets=[stamped_lws()], uninstalling=[keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER]) == {}


def test_a_reserved_annotation_alone_is_a_stamp() -> None:
    lws = stamped_lws()
    del lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
    assert set(left(leaderworkersets=[lws])) == {("LeaderWorkerSet", "deepseek-r1")}


def stamped_child() -> dict[str, Any]:
    """llm-serving's prefill child LeaderWorkerSet, its worker template stamped for the slice scope."""
    child = objects.child_lws("prefill")
    child["spec"]["leaderWorkerTemplate"]["workerTemplate"] = {
        "metadata": {"labels": {keys.SCOPE_LABEL: keys.SCOPE_SLICE}},
        "spec": {},
    }
    return child


def test_a_stamped_disaggregatedset_is_left_and_its_children_are_not_listed_apart() -> None:
    child = stamped_child()
    found = left(disaggregatedsets=[stamped_ds()], leaderworkersets=[child])
    assert set(found) == {(keys.DS_KIND, "llm-serving")}
    assert "prefill.workerTemplate (slice)" in found[(keys.DS_KIND, "llm-serving")].why
    assert f"{keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION} on it and its roles" in found[(keys.DS_KIND, "llm-serving")].fix
    # Its set not listed (its API not served, say): the child is, and the fix names the set.
    [orphan_child] = left(leaderworkersets=[child]).values()
    assert orphan_child.fix.startswith("delete its DisaggregatedSet llm-serving (its controller)")


def test_a_stamped_child_of_an_opted_out_disaggregatedset_is_left_on_its_own() -> None:
    # The set opted out (its templates carry no stamp any more) while its old revision drains: the old child still
    # has its stamps, and nothing else in the report would name it.
    opted_out = objects.ds()
    opted_out["metadata"]["annotations"] = {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: keys.OPT_IN_DISABLED}
    found = left(disaggregatedsets=[opted_out], leaderworkersets=[stamped_child()])
    [(kind, name)] = found
    assert (kind, name) == ("LeaderWorkerSet", "llm-serving-0-251a724d-prefill")
    assert "workerTemplate (slice)" in found[(kind, name)].why
    assert "wait until its rollout has replaced this revision" in found[(kind, name)].fix


def test_a_role_stamped_for_the_replica_scope_needs_mnnvl_lws() -> None:
    ds = stamped_ds(keys.SCOPE_REPLICA)
    assert left(disaggregatedsets=[ds], uninstalling=[keys.DS_CONTROLLER]) == {}
    assert set(left(disaggregatedsets=[ds], uninstalling=[keys.LWS_CONTROLLER])) == {(keys.DS_KIND, "llm-serving")}


def test_workloads_come_first_then_pods_then_domains_and_the_text_names_each() -> None:
    found = uninstall.leftovers(
        compute_domains=[objects.domain("deepseek-r1-0-bcdfg")],
        pods=[objects.pod("deepseek-r1-0", domain="deepseek-r1-0-bcdfg", gated=True)],
        leaderworkersets=[stamped_lws()],
        disaggregatedsets=[],
        uninstalling=EVERYTHING,
    )
    assert [o.kind for o in found] == ["LeaderWorkerSet", "Pod", keys.COMPUTE_DOMAIN_KIND]
    assert uninstall.exit_code(found) == 1
    text = uninstall.as_text(found, EVERYTHING)
    assert text.startswith("Uninstalling mnnvl-ds, mnnvl-guardian, mnnvl-lws now would leave 3 object(s) behind")
    for line in (
        f"- LeaderWorkerSet {objects.NS}/deepseek-r1",
        f"- Pod {objects.NS}/deepseek-r1-0",
        f"- ComputeDomain {objects.NS}/deepseek-r1-0-bcdfg",
    ):
        assert line in text.splitlines()
    data = uninstall.as_data(found, EVERYTHING)
    assert data["uninstalling"] == sorted(EVERYTHING)
    assert data["leftovers"][0] == {
        "kind": "LeaderWorkerSet",
        "namespace": objects.NS,
        "name": "deepseek-r1",
        "why": found[0].why,
        "fix": found[0].fix,
    }
    assert "leaves nothing behind" in uninstall.as_text([], EVERYTHING)
