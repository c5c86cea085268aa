"""The RBAC the chart ships, on the real API server: for each controller, every verb on every resource it needs is
allowed, and what it must never do is denied (SubjectAccessReview, as `kubectl auth can-i --as` asks).

The rules are those of a second release (`access`, in a namespace of its own) with every controller enabled and the
feature gate on; it is installed beside the testbed's own release (`mnnvl`), which shows that two releases do not
collide: every cluster-scoped name carries the release's name, and the first release's objects stay untouched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from mnnvl_runtime import kube
from mnnvl_testbed import chart, cluster, release, testing

ACCESS_RELEASE = "access"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
#: Every controller's block, as the chart names them.
BLOCKS = ("lws", "ds", "guardian", "topology")


@dataclasses.dataclass(frozen=True)
class Can:
    verb: str
    resource: str
    group: str = ""
    #: None: the release's own namespace; "" cluster-wide (or every namespace); else that namespace.
    namespace: str | None = "serving"
    name: str = ""


def needs(block: str) -> list[Can]:
    """What each controller does (its watches, reads and writes), as the code calls the API."""
    cd = "resource.nvidia.com"
    lease = f"mnnvl-{block}"
    common = [
        Can("create", "events"),
        Can("create", "leases", "coordination.k8s.io", None),
        *(Can(verb, "leases", "coordination.k8s.io", None, lease) for verb in ("get", "update", "patch")),
    ]
    if block == "lws":
        return [
            *common,
            *(Can(verb, "pods", namespace="") for verb in ("list", "watch")),
            *(Can(verb, "pods") for verb in ("get", "patch")),
            Can("get", "statefulsets", "apps"),
            *(Can(verb, "leaderworkersets", "leaderworkerset.x-k8s.io", "") for verb in ("list", "watch")),
            Can("get", "leaderworkersets", "leaderworkerset.x-k8s.io"),
            *(Can(verb, "resourceclaimtemplates", "resource.k8s.io", "") for verb in ("list", "watch")),
            *(Can(verb, "computedomains", cd, "") for verb in ("list", "watch")),
            *(Can(verb, "computedomains", cd) for verb in ("get", "create", "patch", "delete")),
        ]
    if block == "ds":
        return [
            *common,
            *(Can(verb, "pods", namespace="") for verb in ("list", "watch")),
            *(Can(verb, "pods") for verb in ("get", "patch")),
            *(Can(verb, "disaggregatedsets", "disaggregatedset.x-k8s.io", "") for verb in ("list", "watch")),
            *(Can(verb, "disaggregatedsets", "disaggregatedset.x-k8s.io") for verb in ("get", "patch")),
            *(Can(verb, "leaderworkersets", "leaderworkerset.x-k8s.io", "") for verb in ("list", "watch")),
            Can("get", "leaderworkersets", "leaderworkerset.x-k8s.io"),
            *(Can(verb, "resourceclaimtemplates", "resource.k8s.io", "") for verb in ("list", "watch")),
            *(Can(verb, "computedomains", cd, "") for verb in ("list", "watch")),
            *(Can(verb, "computedomains", cd) for verb in ("get", "create", "patch", "delete")),
        ]
    if block == "guardian":
        return [
            *common,
            *(Can(verb, "pods", namespace="") for verb in ("list", "watch")),
            Can("get", "pods"),  # Deny mode reads back the pods its store names
            Can("get", "nodes", namespace=""),  # and the nodes of terminating ones (stuck pods)
            *(Can(verb, "computedomains", cd, "") for verb in ("list", "watch")),
            *(Can(verb, "computedomains", cd) for verb in ("get", "patch")),
        ]
    return [
        *common,
        *(
            Can(verb, "topologies", "kai.scheduler", "")
            for verb in ("get", "list", "watch", "create", "patch", "delete")
        ),
        *(
            Can(verb, "clustertopologybindings", "grove.io", "")
            for verb in ("get", "list", "watch", "create", "patch", "delete")
        ),
        Can("get", "customresourcedefinitions", "apiextensions.k8s.io", "", "topologies.kai.scheduler"),
        *(Can(verb, resource, namespace="") for resource in ("nodes", "pods") for verb in ("list", "watch")),
        *(Can(verb, "computedomains", cd, "") for verb in ("list", "watch")),
        Can("get", "leaderworkersets", "leaderworkerset.x-k8s.io"),
        Can("get", "statefulsets", "apps"),
        Can("get", "jobs", "batch"),
        Can("get", "podgangs", "scheduler.grove.io"),
        Can("get", "podcliquesets", "grove.io"),
        Can("get", "dynamographdeployments", "nvidia.com"),
        Can("create", "configmaps", namespace=None),
        Can("patch", "configmaps", namespace=None, name="mnnvl-clique-census"),
    ]


def forbidden(block: str) -> list[Can]:
    """What no controller may do, and what each one in particular must not."""
    cd = "resource.nvidia.com"
    never = [
        *(Can(verb, "secrets", namespace=ns) for verb in ("get", "list", "watch") for ns in ("serving", None, "")),
        *(Can(verb, "pods") for verb in ("create", "delete", "update")),
        Can("create", "pods/exec"),
        Can("update", "deployments", "apps"),
        Can("delete", "nodes", namespace=""),
        Can("patch", "nodes", namespace=""),
        Can("delete", "namespaces", namespace=""),
        Can("bind", "clusterroles", "rbac.authorization.k8s.io", ""),
        Can("escalate", "clusterroles", "rbac.authorization.k8s.io", ""),
        Can("create", "customresourcedefinitions", "apiextensions.k8s.io", ""),
        Can("update", "leases", "coordination.k8s.io", None, "mnnvl-someone-else"),
        Can("delete", "leases", "coordination.k8s.io", None, f"mnnvl-{block}"),
        Can("create", "mutatingwebhookconfigurations", "admissionregistration.k8s.io", ""),
        Can("update", "leaderworkersets", "leaderworkerset.x-k8s.io"),
        Can("delete", "leaderworkersets", "leaderworkerset.x-k8s.io"),
        Can("update", "disaggregatedsets", "disaggregatedset.x-k8s.io"),
        Can("delete", "disaggregatedsets", "disaggregatedset.x-k8s.io"),
        Can("create", "configmaps"),
    ]
    if block == "guardian":
        never += [Can("create", "computedomains", cd), Can("delete", "computedomains", cd)]
    if block == "topology":
        never += [Can(verb, "computedomains", cd) for verb in ("create", "patch", "delete")]
        never += [Can("patch", "configmaps", namespace=None, name="some-other-configmap")]
        # Only KAI's Topology CRD is read (its schema); the census is applied, never read back.
        never += [
            Can("get", "customresourcedefinitions", "apiextensions.k8s.io", "", "computedomains.resource.nvidia.com")
        ]
        never += [Can("get", "configmaps", namespace=None, name="mnnvl-clique-census")]
        never += [Can("patch", "pods")]
    else:
        never += [Can("create", "topologies", "kai.scheduler", "")]
    if block in ("lws", "ds"):
        never += [Can("get", "nodes", namespace="")]
    if block in ("lws", "guardian"):
        never += [Can("patch", "disaggregatedsets", "disaggregatedset.x-k8s.io")]
    return never


def allowed(api: kube.Kube, namespace: str, account: str, can: Can) -> bool:
    attributes = {"verb": can.verb, "group": can.group, "resource": can.resource.split("/")[0]}
    if "/" in can.resource:
        attributes["subresource"] = can.resource.split("/", 1)[1]
    target_namespace = namespace if can.namespace is None else can.namespace
    if target_namespace:
        attributes["namespace"] = target_namespace
    if can.name:
        attributes["name"] = can.name
    return testing.service_account_allowed(api, namespace, account, attributes)


@pytest.fixture(scope="module")
def access_release(testbed: cluster.Testbed) -> Iterator[tuple[str, dict[str, str]]]:
    """The `access` release's RBAC applied in a namespace of its own: (namespace, block → ServiceAccount)."""
    api = testbed.api()
    with testing.namespace(api, "mnnvl-access") as namespace:
        overrides = {
            "featureGates": {"AutoComputeDomain": True},
            "certs": {"mode": "secret", "secretName": "unused", "caBundle": "dW51c2Vk"},
            **{block: {"enabled": True} for block in BLOCKS},
            "topology": {"enabled": True, "kaiScheduler": {"installed": True}},
        }
        objects = [
            o
            for o in chart.render(overrides=overrides, release=ACCESS_RELEASE, namespace=namespace)
            if o["kind"] in RBAC_KINDS
        ]
        for manifest in objects:
            api.apply(manifest, release.RESOURCES[manifest["kind"]].plural)
        accounts = {
            o["metadata"]["labels"]["app.kubernetes.io/component"]: o["metadata"]["name"]
            for o in objects
            if o["kind"] == "ServiceAccount"
        }
        try:
            yield namespace, accounts
        finally:
            for manifest in objects:
                if manifest["kind"].startswith("Cluster"):
                    api.delete(
                        kube.path_of(
                            manifest["apiVersion"],
                            release.RESOURCES[manifest["kind"]].plural,
                            name=manifest["metadata"]["name"],
                        )
                    )


@pytest.mark.parametrize("block", BLOCKS)
def test_each_controller_may_do_what_it_needs_and_nothing_it_must_not(
    api: kube.Kube, access_release: tuple[str, dict[str, str]], block: str
) -> None:
    namespace, accounts = access_release
    account = accounts[block]
    missing = [can for can in needs(block) if not allowed(api, namespace, account, can)]
    assert missing == [], f"{account} lacks what it needs"
    granted = [can for can in forbidden(block) if allowed(api, namespace, account, can)]
    assert granted == [], f"{account} may do what it must not"


def test_a_second_release_does_not_touch_the_first(
    api: kube.Kube, testbed: cluster.Testbed, access_release: tuple[str, dict[str, str]], lws_controller: object
) -> None:
    """Cluster-scoped names carry the release's name: the `access` release's ClusterRoles are its own, and the
    testbed release's controllers keep theirs, bound to their own ServiceAccounts."""
    namespace, accounts = access_release
    for block in ("lws", "ds", "guardian"):
        ours = api.request(
            "GET", kube.path_of("rbac.authorization.k8s.io/v1", "clusterrolebindings", name=f"mnnvl-{block}")
        )
        assert ours["subjects"] == [
            {"kind": "ServiceAccount", "name": f"mnnvl-{block}", "namespace": release.NAMESPACE}
        ]
        theirs = api.request(
            "GET", kube.path_of("rbac.authorization.k8s.io/v1", "clusterrolebindings", name=accounts[block])
        )
        assert theirs["subjects"] == [{"kind": "ServiceAccount", "name": accounts[block], "namespace": namespace}]
        assert accounts[block] != f"mnnvl-{block}"
