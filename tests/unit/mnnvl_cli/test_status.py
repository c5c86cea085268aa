"""`kubectl mnnvl status`: the summary of one snapshot, with plain objects."""

from __future__ import annotations

import datetime
import json

from mnnvl_api import keys
from mnnvl_cli import render, status
from mnnvl_cli.snapshot import MISSING_CLAIM, Snapshot

from ..mnnvl_api.domain_builders import UID
from . import objects

NOW = datetime.datetime(2026, 12, 4, 10, 10, tzinfo=datetime.UTC)
READY = "deepseek-r1-0-bcdfg"
WAITING = "deepseek-r1-1-hjklm"
RETIRED = "deepseek-r1-0-nprst"


def two_groups() -> Snapshot:
    """Group 0 runs on a ready domain; group 1's domain is not made yet (its pods are gated); a retired domain of
    group 0 still has a draining pod, another retired one has none."""
    return objects.cluster(
        leaderworkersets=[objects.lws()],
        pods=[
            objects.pod("deepseek-r1-0", domain=READY),
            objects.pod("deepseek-r1-0-1", worker=1, domain=READY),
            objects.pod("deepseek-r1-1", group=1, domain=WAITING, gated=True),
            objects.pod("deepseek-r1-1-1", group=1, worker=1, domain=WAITING, gated=True),
            objects.pod("old-worker", worker=1, domain=RETIRED, labels={keys.LWS_GROUP_INDEX_LABEL: "9"}),
        ],
        domains=[objects.domain(READY), objects.domain(RETIRED), objects.domain("deepseek-r1-0-vwxzb")],
        ready_templates=[READY, RETIRED],
    )


def test_each_group_has_its_domain_readiness_and_pods() -> None:
    [found] = status.statuses(two_groups())
    units = {unit.group: unit for unit in found.units}
    assert units["0"].domain is not None
    assert units["0"].domain.ready
    assert units["0"].domain.since == "2026-12-04T10:00:02Z"  # when its claim template appeared
    waiting = units["1"].domain
    assert waiting is not None
    assert not waiting.ready
    assert not waiting.exists
    assert "does not exist" in waiting.reason
    assert [p.gated for p in units["1"].pods] == [True, True]
    pod = units["0"].pods[0]
    assert (pod.claim_in, pod.no_claim) == (["vllm"], {"routing-proxy": "CPU-only"})
    assert pod.clique == "45640c00-b35b-58b8-b0e8-ed410280e5ea.1"


def test_obsolete_domains_name_the_pods_they_wait_for() -> None:
    [found] = status.statuses(two_groups())
    obsolete = {d.name: d for d in found.obsolete_domains}
    assert obsolete[RETIRED].waiting_for == ["old-worker"]
    assert "once its pods are gone" in obsolete[RETIRED].state
    assert obsolete["deepseek-r1-0-vwxzb"].waiting_for == []
    assert READY not in obsolete


def test_a_domain_of_the_same_name_made_by_someone_else_is_a_collision() -> None:
    snapshot = objects.cluster(
        leaderworkersets=[objects.lws()],
        pods=[objects.pod("deepseek-r1-0", domain=READY, gated=True)],
        domains=[objects.foreign_domain(READY)],
        ready_templates=[READY],
    )
    [found] = status.statuses(snapshot)
    domain = found.units[0].domain
    assert domain is not None
    assert not domain.ready
    assert domain.reason.startswith("name collision: it is not lws/deepseek-r1")
    assert found.obsolete_domains == []  # a foreign domain is never ours to retire


def test_a_domain_relabelled_to_look_like_ours_is_still_foreign() -> None:
    snapshot = objects.cluster(
        leaderworkersets=[objects.lws()],
        pods=[objects.pod("deepseek-r1-0", domain=READY, gated=True)],
        domains=[objects.domain(READY, created_by="kubectl")],
        ready_templates=[READY],
    )
    [found] = status.statuses(snapshot)
    assert found.units[0].domain is not None
    assert "name collision" in found.units[0].domain.reason


def test_condemned_and_deleting_domains_are_not_ready() -> None:
    for domain, words in (
        (objects.domain(READY, condemned=True), "about to be deleted"),
        (objects.domain(READY, deleting=True), "being deleted"),
    ):
        snapshot = objects.cluster(
            leaderworkersets=[objects.lws()],
            pods=[objects.pod("deepseek-r1-0", domain=READY)],
            domains=[domain],
            ready_templates=[READY],
        )
        [found] = status.statuses(snapshot)
        assert found.units[0].domain is not None
        assert not found.units[0].domain.ready
        assert words in found.units[0].domain.reason


def test_a_domain_without_its_claim_template_waits_for_the_driver() -> None:
    snapshot = objects.cluster(
        leaderworkersets=[objects.lws()],
        pods=[objects.pod("deepseek-r1-0", domain=READY, gated=True)],
        domains=[objects.domain(READY)],
    )
    [found] = status.statuses(snapshot)
    assert found.units[0].domain is not None
    assert (
        found.units[0].domain.reason == f"waiting for the NVIDIA driver to create ResourceClaimTemplate {READY}-channel"
    )


def test_workloads_not_opted_in_are_listed_only_when_named() -> None:
    plain = objects.lws("plain", opt_in=None, uid="uid-plain")
    snapshot = objects.cluster(
        leaderworkersets=[objects.lws(), plain],
        pods=[objects.pod("plain-0", lws_name="plain", scope=None, claimed=False)],
    )
    assert [s.name for s in status.statuses(snapshot)] == ["deepseek-r1"]
    [named] = status.statuses(snapshot, named="lws/plain")
    assert named.opt_in == "not set"
    assert named.units[0].pods[0].no_claim == {
        "vllm": "workload not opted in",
        "routing-proxy": "workload not opted in",
    }
    assert status.statuses(snapshot, named="disaggregatedset/plain") == []


def test_a_pod_admitted_without_the_webhook_is_told_apart_from_cpu_only_containers() -> None:
    snapshot = objects.cluster(
        leaderworkersets=[objects.lws()],
        pods=[objects.pod("deepseek-r1-0", domain=None, claimed=False)],
    )
    [found] = status.statuses(snapshot)
    assert found.units[0].pods[0].no_claim == {
        "vllm": MISSING_CLAIM,
        "routing-proxy": "CPU-only",
    }


def test_containers_left_out_by_the_containers_annotation_say_so() -> None:
    pod = objects.pod("deepseek-r1-0", domain=READY)
    pod["metadata"]["annotations"][keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION] = "vllm"
    pod["spec"]["containers"][1]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    snapshot = objects.cluster(leaderworkersets=[objects.lws()], pods=[pod], domains=[objects.domain(READY)])
    [found] = status.statuses(snapshot)
    assert found.units[0].pods[0].no_claim == {
        "routing-proxy": f"not targeted ({keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION} names vllm)"
    }


def test_a_disaggregated_set_is_summarised_per_slice_and_revision() -> None:
    slice_domain = "llm-serving-0-251a724d"
    snapshot = objects.cluster(
        leaderworkersets=[objects.child_lws("prefill"), objects.child_lws("encoder")],
        disaggregatedsets=[objects.ds()],
        pods=[
            objects.pod(
                "prefill-0",
                lws_name="x",
                domain=slice_domain,
                scope=keys.SCOPE_SLICE,
                labels=objects.ds_labels("prefill"),
            ),
            objects.pod("encoder-0", lws_name="y", scope=None, claimed=False, labels=objects.ds_labels("encoder")),
        ],
        domains=[
            objects.domain(slice_domain, owner_uid=objects.DS_UID, manager=keys.DS_CONTROLLER, workload="llm-serving"),
            objects.domain(
                "llm-serving-0-0ld", owner_uid=objects.DS_UID, manager=keys.DS_CONTROLLER, workload="llm-serving"
            ),
        ],
        ready_templates=[slice_domain],
    )
    [found] = status.statuses(snapshot)  # the child LeaderWorkerSets are not listed on their own
    assert found.kind == keys.DS_KIND
    assert found.role_scopes == {"prefill": "slice", "decode": "slice", "encoder": "none"}
    [unit] = found.units
    assert (unit.slice, unit.revision) == ("0", "251a724d")
    assert unit.domain is not None
    assert unit.domain.ready
    assert unit.domain.name == slice_domain
    pods = {p.name: p for p in unit.pods}
    assert pods["encoder-0"].no_claim["vllm"] == "role encoder opted out"
    assert pods["prefill-0"].role == "prefill/leader"
    assert [d.name for d in found.obsolete_domains] == ["llm-serving-0-0ld"]


def test_the_table_fits_120_columns_and_is_plain_off_a_terminal() -> None:
    long_pod = objects.pod("deepseek-r1-0-" + "x" * 60, domain=READY)
    snapshot = two_groups()
    snapshot = objects.cluster(
        leaderworkersets=snapshot.leaderworkersets,
        pods=[*snapshot.pods, long_pod],
        domains=snapshot.domains,
        ready_templates=[READY, RETIRED],
    )
    found = status.statuses(snapshot)
    plain = status.as_table(found, now=NOW, style=render.Style(colour=False))
    assert all(len(line) <= render.WIDTH for line in plain.splitlines())
    assert "\x1b[" not in plain
    assert f"group 0: ComputeDomain {READY} ready for 9m" in plain
    assert "waiting for pods: old-worker" in plain
    coloured = status.as_table(found, now=NOW, style=render.Style(colour=True))
    assert "\x1b[32mready\x1b[0m" in coloured
    assert all(render.visible_length(line) <= render.WIDTH for line in coloured.splitlines())


def test_json_gives_the_same_facts_in_camel_case() -> None:
    data = json.loads(render.as_json(status.as_data(status.statuses(two_groups()))))
    [workload] = data["workloads"]
    assert workload["optIn"] == "enabled"
    assert workload["units"][0]["pods"][0]["claimIn"] == ["vllm"]
    assert {d["name"]: d["waitingFor"] for d in workload["obsoleteDomains"]}[RETIRED] == ["old-worker"]
    assert UID not in json.dumps(workload["units"])  # facts, not the raw objects


def test_no_opted_in_workload_says_how_to_see_one() -> None:
    assert "name one" in status.as_table([], now=NOW, style=render.Style())


def test_a_replica_scope_role_of_a_disaggregated_set_shows_its_own_domains_owned_by_its_child() -> None:
    """A role with per-replica domains inside a DisaggregatedSet: mnnvl-lws made its domains for the child
    LeaderWorkerSet, so they are ready (not a collision with the set), and a retired one is listed as obsolete."""
    ds = objects.ds()
    ds["spec"]["roles"][2]["metadata"] = {
        "annotations": {
            keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: keys.OPT_IN_DISABLED,
            keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: keys.OPT_IN_ENABLED,
        }
    }
    child = objects.child_lws("encoder")
    replica = "llm-serving-0-251a724d-encoder-0-bcdfg"
    retired = "llm-serving-0-251a724d-encoder-0-hjklm"
    owned = {"owner_uid": child["metadata"]["uid"], "workload": child["metadata"]["name"]}
    encoder = objects.pod(
        "llm-serving-0-251a724d-encoder-0",
        lws_name=child["metadata"]["name"],
        domain=replica,
        labels=objects.ds_labels("encoder"),
    )
    found = objects.cluster(
        leaderworkersets=[child],
        disaggregatedsets=[ds],
        pods=[encoder],
        domains=[objects.domain(replica, **owned), objects.domain(retired, **owned)],
        ready_templates=[replica],
    )
    [summary] = status.statuses(found)
    [unit] = summary.units
    assert summary.role_scopes["encoder"] == "replica"
    assert unit.domain is not None
    assert unit.domain.name == "llm-serving-0-251a724d"  # prefill and decode share it
    assert unit.replica_domains["encoder/0"].ready
    assert unit.replica_domains["encoder/0"].name == replica
    assert [d.name for d in summary.obsolete_domains] == [retired]
    table = status.as_table([summary], now=NOW, style=render.Style())
    assert f"per-replica ComputeDomain {replica} ready" in table


def test_without_read_access_to_nodes_and_claim_templates_status_says_what_it_cannot_tell() -> None:
    pods = [objects.pod("deepseek-r1-0", domain=READY)]
    base = objects.cluster(leaderworkersets=[objects.lws()], pods=pods, domains=[objects.domain(READY)])
    blind = Snapshot(
        leaderworkersets=base.leaderworkersets,
        disaggregatedsets=base.disaggregatedsets,
        pods=base.pods,
        domains=base.domains,
        claim_templates=None,
        node_cliques=None,
    )
    [found] = status.statuses(blind)
    domain = found.units[0].domain
    assert domain is not None
    assert not domain.ready
    assert "cannot tell whether its ResourceClaimTemplate" in domain.reason
    assert found.units[0].pods[0].clique is None


def test_a_gpu_sidecar_without_the_claim_is_named() -> None:
    pod = objects.pod("deepseek-r1-0", domain=None, claimed=False)
    pod["spec"]["initContainers"] = [
        {"name": "nixl", "restartPolicy": "Always", "resources": {"limits": {keys.GPU_RESOURCE: "1"}}},
        {"name": "setup"},
    ]
    [found] = status.statuses(objects.cluster(leaderworkersets=[objects.lws()], pods=[pod]))
    assert found.units[0].pods[0].no_claim["nixl"] == MISSING_CLAIM
    assert "setup" not in found.units[0].pods[0].no_claim
