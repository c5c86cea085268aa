"""Deny mode at scale and on lost nodes: the refusal comes from the guardian's stores, read back with cheap GETs,
and a fresh list (through the writer's limiter) only when the stores name no user; stuck pods are named with
the command that lets them go."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from mnnvl_api import keys
from mnnvl_api.decisions import domains
from mnnvl_guardian import admission, planner
from mnnvl_runtime import domain_writer, kube

from ..mnnvl_api import domain_builders

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
DOMAIN = domain_builders.domain("dsr1-0-x7k2b")


def at(seconds: float) -> str:
    return (NOW + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *, deleting_at: str | None = None, node: str = "gb200-0", phase: str = "Running") -> kube.Object:
    meta: dict[str, Any] = {"name": name, "namespace": "serving", "uid": f"uid-{name}"}
    if deleting_at is not None:
        meta["deletionTimestamp"] = deleting_at
    claim = {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": DOMAIN.claim_template}
    return {"metadata": meta, "spec": {"nodeName": node, "resourceClaims": [claim]}, "status": {"phase": phase}}


def node(name: str, *, ready: bool) -> kube.Object:
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


# --- pure decisions ------------------------------------------------------------------------------------------


def test_a_terminating_pod_is_stuck_past_its_grace_period_or_on_a_lost_node() -> None:
    assert not planner.is_stuck(pod("running"), now=NOW, lost_nodes={"gb200-0"})  # not terminating: not stuck
    assert not planner.is_stuck(pod("finishing", deleting_at=at(20)), now=NOW, lost_nodes=set())
    assert planner.is_stuck(pod("overdue", deleting_at=at(-1)), now=NOW, lost_nodes=set())
    assert planner.is_stuck(pod("on-lost-node", deleting_at=at(3600)), now=NOW, lost_nodes={"gb200-0"})


def test_a_node_is_lost_when_gone_or_not_ready() -> None:
    assert planner.node_lost(None)
    assert planner.node_lost(node("n", ready=False))
    assert planner.node_lost({"metadata": {"name": "n"}, "status": {}})  # never reported
    assert not planner.node_lost(node("n", ready=True))


def test_a_refusal_over_stuck_pods_names_them_and_the_force_delete_command() -> None:
    message = planner.refusal(DOMAIN, ["w-1", "w-0"], stuck=["w-1", "w-0"])
    assert message == (
        "ComputeDomain dsr1-0-x7k2b is held by 2 pod(s) stuck Terminating (past their grace period, or on a node "
        "that is NotReady or gone), which cannot finish on their own. Once you have made sure they no longer run "
        "(their node is down), force-delete them: kubectl delete pod -n serving --force --grace-period=0 w-0 w-1; "
        "the deletion is allowed once no pod uses the domain"
    )
    assert "Scale down" not in message


def test_a_refusal_over_running_and_stuck_pods_names_each_with_its_fix() -> None:
    message = planner.refusal(DOMAIN, ["leader", "w-1"], stuck=["w-1"])
    assert message is not None
    assert message.startswith("ComputeDomain dsr1-0-x7k2b is in use by pods leader: deleting it now would tear")
    assert 'Scale down or delete the workload that owns it (workload "deepseek-r1")' in message
    assert ". It is also held by 1 pod(s) stuck Terminating" in message
    assert message.endswith("--grace-period=0 w-1; the deletion is allowed once no pod uses the domain")


def test_the_force_delete_command_names_at_most_ten_pods_and_counts_the_rest() -> None:
    stuck = [f"w-{n:02}" for n in range(12)]
    message = planner.refusal(DOMAIN, stuck, stuck=stuck)
    assert message is not None
    assert "--grace-period=0 w-00 w-01 w-02 w-03 w-04 w-05 w-06 w-07 w-08 w-09 (and the 2 more likewise)" in message


def test_an_unverified_check_refuses_and_says_to_retry() -> None:
    assert planner.unverified(DOMAIN, 7.0) == (
        "ComputeDomain dsr1-0-x7k2b: could not confirm within 7s that no pod uses it (the API server is slow or "
        "unreachable), so its deletion is refused rather than risk tearing down IMEX under a running pod; retry "
        "the deletion"
    )


# --- the check against an API that counts what it is asked -----------------------------------------------------


class Api:
    """Pods and nodes, as GET and list answer for them; counts the fresh pod lists and the lists in flight."""

    def __init__(self, pods: list[kube.Object], nodes: list[kube.Object] = ()) -> None:  # type: ignore[assignment]
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.lists = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.gets: list[str] = []
        #: Cleared: every list waits until it is set.
        self.answering = asyncio.Event()
        self.answering.set()

    async def aget(self, api_version: str, plural: str, name: str, *, namespace: str | None = None) -> Any:
        self.gets.append(f"{plural}/{name}")
        return (self.pods if plural == "pods" else self.nodes).get(name)

    async def alist_page(self, api_version: str, plural: str, **_: Any) -> kube.Page:
        assert plural == "pods"
        self.lists += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.answering.wait()
        finally:
            self.in_flight -= 1
        return kube.Page(items=list(self.pods.values()), resource_version="9")


def guardian_writer(api: Api) -> domain_writer.DomainWriter:
    return domain_writer.DomainWriter(api, component="mnnvl-guardian", scope="guardian", fence_seconds=30)  # type: ignore[arg-type]


def check(api: Api, indexed: list[str], domain: domains.DomainFacts = DOMAIN) -> str | None:
    async def run() -> str | None:
        writer = guardian_writer(api)
        return await admission.deletion_refusal(api, writer, domain, indexed)  # type: ignore[arg-type]

    return asyncio.run(run())


def test_pods_the_stores_name_are_read_back_and_refused_on_without_listing_the_namespace() -> None:
    api = Api([pod("dsr1-0"), pod("dsr1-0-1")])
    message = check(api, ["dsr1-0", "dsr1-0-1"])
    assert message is not None
    assert "is in use by pods dsr1-0, dsr1-0-1:" in message
    assert api.lists == 0
    assert api.gets == ["pods/dsr1-0", "pods/dsr1-0-1"]


def test_with_no_user_in_the_stores_a_fresh_list_decides() -> None:
    unlabelled = pod("by-hand")  # holds the claim without our scope label: the stores never saw it
    api = Api([unlabelled])
    message = check(api, [])
    assert message is not None
    assert "is in use by pods by-hand:" in message
    assert api.lists == 1


def test_pods_the_stores_name_that_are_gone_or_done_are_checked_again_by_a_fresh_list() -> None:
    api = Api([pod("done", phase="Succeeded")])
    assert check(api, ["gone", "done"]) is None
    assert api.lists == 1


def test_a_pod_past_its_grace_period_or_terminating_on_a_lost_node_is_named_as_stuck() -> None:
    overdue = pod("overdue", deleting_at="2020-01-01T00:00:00Z", node="gb200-1")
    on_lost_node = pod("on-lost-node", deleting_at="2999-01-01T00:00:00Z", node="gb200-2")
    finishing = pod("finishing", deleting_at="2999-01-01T00:00:00Z", node="gb200-3")
    api = Api(
        [overdue, on_lost_node, finishing],
        [node("gb200-1", ready=True), node("gb200-3", ready=True)],  # gb200-2 is gone
    )
    message = check(api, ["finishing", "on-lost-node", "overdue"])
    assert message is not None
    assert "is in use by pods finishing:" in message
    assert "--force --grace-period=0 on-lost-node overdue;" in message
    assert sorted(g for g in api.gets if g.startswith("nodes/")) == ["nodes/gb200-1", "nodes/gb200-2", "nodes/gb200-3"]


def test_fresh_checks_go_through_the_writers_limiter_of_fresh_lists() -> None:
    api = Api([])
    many = [domain_builders.domain(f"d-{n}-abcde") for n in range(3 * domain_writer.FRESH_POD_LISTS_AT_ONCE)]

    async def run() -> list[str | None]:
        writer = guardian_writer(api)
        api.answering.clear()
        checks = [asyncio.create_task(admission.deletion_refusal(api, writer, d, [])) for d in many]  # type: ignore[arg-type]
        await asyncio.wait_for(until_lists_in_flight(api, domain_writer.FRESH_POD_LISTS_AT_ONCE), 5)
        for _ in range(10):  # give any check outside the limiter its chance to start a list too
            await asyncio.sleep(0)
        api.answering.set()
        return await asyncio.gather(*checks)

    assert asyncio.run(run()) == [None] * len(many)
    assert api.most_in_flight == domain_writer.FRESH_POD_LISTS_AT_ONCE
    assert api.lists == len(many)


def test_a_check_that_does_not_finish_in_time_refuses() -> None:
    api = Api([])
    api.answering.clear()  # the fresh list never answers

    async def run() -> str | None:
        writer = guardian_writer(api)
        return await admission.bounded_refusal(api, writer, DOMAIN, [], within=0.05)  # type: ignore[arg-type]

    assert asyncio.run(run()) == planner.unverified(DOMAIN, 0.05)


def test_a_check_the_api_server_fails_refuses() -> None:
    class Unreachable(Api):
        async def aget(self, api_version: str, plural: str, name: str, *, namespace: str | None = None) -> Any:
            raise kube.UnreachableError("GET", f"/api/v1/namespaces/serving/{plural}/{name}", ConnectionError())

    api = Unreachable([pod("dsr1-0")])

    async def run() -> str | None:
        writer = guardian_writer(api)
        return await admission.bounded_refusal(api, writer, DOMAIN, ["dsr1-0"])  # type: ignore[arg-type]

    assert asyncio.run(run()) == planner.unverified(DOMAIN, admission.CHECK_SECONDS)


async def until_lists_in_flight(api: Api, count: int) -> None:
    while api.in_flight < count:
        await asyncio.sleep(0)
