"""`kubectl mnnvl explain POD`: the chain that decides one pod, with plain objects."""

from __future__ import annotations

from mnnvl_api import keys
from mnnvl_api.models import configuration as configuration_file
from mnnvl_cli import explain, release, render

from . import objects

DOMAIN = "deepseek-r1-0-bcdfg"
POD_WEBHOOKS = {release.pod_webhook(keys.LWS_CONTROLLER), release.pod_webhook(keys.DS_CONTROLLER)}


def installed(*, gate: bool) -> list[release.InstalledController]:
    return [
        release.InstalledController(
            controller=keys.LWS_CONTROLLER,
            namespace="mnnvl-system",
            component_name="mnnvl-lws",
            config_map="mnnvl-lws-configuration",
            configuration=configuration_file.Configuration.model_validate(
                {"featureGates": {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE: gate}}
            ),
        )
    ]


def links(found: explain.Explanation) -> dict[str, explain.Link]:
    return {link.about: link for link in found.links}


def test_a_gated_pod_whose_domain_name_collides_with_a_foreign_domain_says_so_and_where_to_look() -> None:
    pod = objects.pod("deepseek-r1-0", domain=DOMAIN, gated=True)
    snapshot = objects.cluster(
        leaderworkersets=[objects.lws()], pods=[pod], domains=[objects.foreign_domain(DOMAIN)], ready_templates=[DOMAIN]
    )
    found = explain.explain(pod, snapshot, controllers=installed(gate=True), webhooks=POD_WEBHOOKS)
    assert found.verdict.startswith(f"gated until ComputeDomain {DOMAIN} is ready: name collision")
    domain = links(found)["domain"]
    assert domain.problem
    assert domain.look_at == f"kubectl -n {objects.NS} get computedomain {DOMAIN} -o yaml"
    assert "not mnnvl" in domain.finding or "not managed by mnnvl" in domain.finding


def test_a_pod_gated_while_the_feature_gate_is_off_is_told_nothing_removes_the_gate() -> None:
    pod = objects.pod("deepseek-r1-0", domain=DOMAIN, gated=True)
    snapshot = objects.cluster(leaderworkersets=[objects.lws()], pods=[pod], domains=[objects.domain(DOMAIN)])
    found = explain.explain(pod, snapshot, controllers=installed(gate=False), webhooks=POD_WEBHOOKS)
    gate = links(found)["gate"]
    assert "gate is disabled on mnnvl-lws: nothing removes the gate" in gate.finding
    assert gate.look_at == "kubectl -n mnnvl-system get configmap mnnvl-lws-configuration -o yaml"


def test_a_gated_pod_on_a_ready_domain_points_at_the_controller() -> None:
    pod = objects.pod("deepseek-r1-0", domain=DOMAIN, gated=True)
    snapshot = objects.cluster(
        leaderworkersets=[objects.lws()], pods=[pod], domains=[objects.domain(DOMAIN)], ready_templates=[DOMAIN]
    )
    found = explain.explain(pod, snapshot, controllers=installed(gate=True), webhooks=POD_WEBHOOKS)
    assert "removes the gate on its next pass" in found.verdict
    assert links(found)["gate"].look_at == "kubectl -n mnnvl-system get lease mnnvl-lws"


def test_a_running_pod_with_its_claim_has_no_problem() -> None:
    pod = objects.pod("deepseek-r1-0", domain=DOMAIN)
    snapshot = objects.cluster(
        leaderworkersets=[objects.lws()], pods=[pod], domains=[objects.domain(DOMAIN)], ready_templates=[DOMAIN]
    )
    found = explain.explain(pod, snapshot, controllers=installed(gate=True), webhooks=POD_WEBHOOKS)
    assert found.verdict == "not gated: Running on node gb200-000"
    assert not any(link.problem for link in found.links)
    assert links(found)["claim"].finding == f"{keys.CHANNEL_CLAIM_NAME} held by vllm; not in routing-proxy: CPU-only"


def test_a_stamped_pod_admitted_without_the_webhook_is_told_to_be_recreated() -> None:
    pod = objects.pod("deepseek-r1-0", domain=None, claimed=False)
    snapshot = objects.cluster(leaderworkersets=[objects.lws()], pods=[pod])
    found = explain.explain(pod, snapshot, controllers=installed(gate=True), webhooks=set())
    found_links = links(found)
    assert found_links["domain"].problem
    assert "without mnnvl-lws's pod webhook" in found_links["domain"].finding
    assert found_links["claim"].problem
    assert found_links["claim"].look_at is not None
    assert "delete pod deepseek-r1-0" in found_links["claim"].look_at
    assert found_links["webhook"].finding.startswith("mutate-pod.mnnvl-lws.mnnvl.dev is not registered")


def test_pods_mnnvl_leaves_alone_say_why() -> None:
    plain = objects.pod("plain-0", lws_name="plain", scope=None, claimed=False)
    snapshot = objects.cluster(leaderworkersets=[objects.lws("plain", opt_in=None, uid="u")], pods=[plain])
    found = explain.explain(plain, snapshot, controllers=None, webhooks=None)
    assert found.verdict == "left alone by mnnvl (workload not opted in)"
    stranger = {"metadata": {"name": "web", "namespace": objects.NS}, "spec": {"containers": []}}
    assert "never touches it" in explain.explain(stranger, snapshot, controllers=None, webhooks=None).verdict


def test_the_text_marks_problems_and_stays_plain_off_a_terminal() -> None:
    pod = objects.pod("deepseek-r1-0", domain=DOMAIN, gated=True)
    snapshot = objects.cluster(leaderworkersets=[objects.lws()], pods=[pod], domains=[])
    text = explain.as_text(explain.explain(pod, snapshot, controllers=None, webhooks=None), render.Style())
    assert "✗ domain" in text
    assert "\x1b[" not in text
    assert "(mnnvl-lws was not found installed" in text


def test_a_pod_admitted_while_the_gate_was_off_is_not_blamed_on_the_webhook() -> None:
    pod = objects.pod("deepseek-r1-0", domain=None, claimed=False)
    snapshot = objects.cluster(leaderworkersets=[objects.lws()], pods=[pod])
    found = links(explain.explain(pod, snapshot, controllers=installed(gate=False), webhooks=POD_WEBHOOKS))
    assert "admitted while the AutoComputeDomain gate is off on mnnvl-lws" in found["domain"].finding
    assert found["claim"].look_at is not None
    assert found["claim"].look_at.startswith("enable the AutoComputeDomain gate, then delete the pod")


def test_a_replica_scope_pod_of_a_disaggregated_set_is_judged_against_its_child_not_a_collision() -> None:
    child = objects.child_lws("encoder")
    replica = "llm-serving-0-251a724d-encoder-0-bcdfg"
    pod = objects.pod(
        "encoder-0", lws_name=child["metadata"]["name"], domain=replica, labels=objects.ds_labels("encoder")
    )
    snapshot = objects.cluster(
        leaderworkersets=[child],
        disaggregatedsets=[objects.ds()],
        pods=[pod],
        domains=[objects.domain(replica, owner_uid=child["metadata"]["uid"], workload=child["metadata"]["name"])],
        ready_templates=[replica],
    )
    found = explain.explain(pod, snapshot, controllers=installed(gate=True), webhooks=POD_WEBHOOKS)
    assert links(found)["domain"].finding == f"ComputeDomain {replica} is ready"
    assert not any(link.problem for link in found.links)


def test_a_terminating_pod_says_it_keeps_its_domain_until_it_has_gone() -> None:
    pod = objects.pod("deepseek-r1-0", domain=DOMAIN)
    pod["metadata"]["deletionTimestamp"] = "2026-12-04T10:05:00Z"
    snapshot = objects.cluster(leaderworkersets=[objects.lws()], pods=[pod], domains=[objects.domain(DOMAIN)])
    found = explain.explain(pod, snapshot, controllers=None, webhooks=None)
    assert found.verdict == "not gated: Running on node gb200-000, terminating (it keeps its domain until it has gone)"
