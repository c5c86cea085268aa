"""The reads every command makes, through the user's kubeconfig: one paged list per resource kind, narrowed by
label selectors, never a GET per object; and the one-line errors a user gets instead of a traceback."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Final

import yaml

from mnnvl_api import keys
from mnnvl_runtime import kube

from .snapshot import Object, Snapshot

#: The field manager of the CLI's writes (only `gc --apply` writes).
FIELD_MANAGER: Final = keys.CLI
#: A CLI gives up sooner than a controller: the user is waiting.
ATTEMPTS: Final = 3
CLAIM_TEMPLATE_API: Final = "resource.k8s.io/v1"


class UserError(Exception):
    """Something the user can fix, in one line naming the fix; printed without a traceback (exit code 2)."""


def connect(kubeconfig: pathlib.Path | None, context: str | None) -> kube.Kube:
    """A client as the user of `kubeconfig` (None: $KUBECONFIG, else ~/.kube/config, else the Pod's account)."""
    named = os.environ.get("KUBECONFIG", "")
    if kubeconfig is None and named and os.pathsep not in named:  # one file named: errors name it too
        kubeconfig = pathlib.Path(named)
    try:
        api = kube.load_api_client(kubeconfig, context=context, max_connections=8)
    except kube.CredentialsError as error:
        raise UserError(f"{error}; pass --kubeconfig or set KUBECONFIG") from error
    except (yaml.YAMLError, ValueError, TypeError, KeyError) as error:  # a kubeconfig that is not one
        where = kubeconfig or "the default kubeconfig"
        raise UserError(f"cannot read {where}: {type(error).__name__}: {error}".splitlines()[0]) from error
    return kube.Kube(api, field_manager=FIELD_MANAGER, attempts=ATTEMPTS, max_backoff=2.0, max_workers=8)


def explained(error: kube.ApiError, what: str) -> UserError:
    """The one line for an API error while `what` (e.g. `listing pods in namespace x`)."""
    message = api_message(error)
    if error.status is None:
        return UserError(f"{what}: {error}; check the cluster address in your kubeconfig and that it is up")
    if error.status == 401:
        return UserError(f"{what}: not authenticated ({message}); refresh the credentials in your kubeconfig")
    if error.status == 403:
        return UserError(f"{what}: forbidden ({message}); ask for read access to it (RBAC)")
    if error.status == 404:
        return UserError(f"{what}: not found ({message})")
    return UserError(f"{what}: {error.status} {error.reason} ({message})")


def api_message(error: kube.ApiError) -> str:
    """The message of the Status the API server answered with (its reason when the body holds none)."""
    try:
        status = json.loads(error.body or "")
    except ValueError:
        return str(error.reason or error)
    return str(status.get("message") if isinstance(status, dict) and status.get("message") else error.reason)


def list_all(
    client: kube.Kube,
    api_version: str,
    plural: str,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
) -> list[Object] | None:
    """Every object of a kind, page by page; None when the API server does not serve the kind (404)."""
    found: list[Object] = []
    after: str | None = None
    where = f" in namespace {namespace}" if namespace else ""
    try:
        while True:
            page = client.list_page(
                api_version, plural, namespace=namespace, label_selector=label_selector, after=after
            )
            found += page.items
            if page.next is None:
                return found
            after = page.next
    except kube.ApiError as error:
        if error.status == 404:
            return None
        raise explained(error, f"listing {plural}{where}") from error


def optional(
    client: kube.Kube, api_version: str, plural: str, *, namespace: str | None = None, label_selector: str | None = None
) -> list[Object] | None:
    """`list_all` for what a summary can do without: None also when the user may not list it (403)."""
    try:
        return list_all(client, api_version, plural, namespace=namespace, label_selector=label_selector)
    except UserError as error:
        if isinstance(error.__cause__, kube.ApiError) and error.__cause__.status == 403:
            return None
        raise


def required(found: list[Object] | None, api_version: str, plural: str) -> list[Object]:
    if found is None:
        raise UserError(f"the API server does not serve {plural} ({api_version}); is it installed?")
    return found


def read_cluster(client: kube.Kube, namespace: str | None) -> Snapshot:
    """One list of each kind the summaries need, in `namespace` (None: every namespace). Pods are narrowed to those
    of LeaderWorkerSets (every pod of a DisaggregatedSet is one too) by a label selector.

    The domains are listed first: every domain listed was made by a workload that existed before the workload
    lists began, so a workload missing from them is really gone (`gc` relies on this)."""
    domains = list_all(client, keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, namespace=namespace)
    lws = required(
        list_all(client, keys.LWS_API_VERSION, keys.LWS_PLURAL, namespace=namespace),
        keys.LWS_API_VERSION,
        keys.LWS_PLURAL,
    )
    pods = required(
        list_all(client, "v1", "pods", namespace=namespace, label_selector=keys.LWS_NAME_LABEL), "v1", "pods"
    )
    # Without these, readiness and cliques are shown as unknown: a user may read their namespace and no nodes.
    templates = optional(client, CLAIM_TEMPLATE_API, "resourceclaimtemplates", namespace=namespace)
    nodes = optional(client, "v1", "nodes", label_selector=keys.GPU_CLIQUE_LABEL)
    return Snapshot(
        leaderworkersets=lws,
        disaggregatedsets=list_all(client, keys.DS_API_VERSION, keys.DS_PLURAL, namespace=namespace),
        pods=pods,
        domains=domains,
        claim_templates=None
        if templates is None
        else {
            (str(t["metadata"].get("namespace")), str(t["metadata"]["name"])): str(
                t["metadata"].get("creationTimestamp") or ""
            )
            for t in templates
        },
        node_cliques=None
        if nodes is None
        else {str(n["metadata"]["name"]): str(n["metadata"]["labels"][keys.GPU_CLIQUE_LABEL]) for n in nodes},
    )


def no_domain_api_line() -> str:
    return (
        f"the API server does not serve {keys.COMPUTE_DOMAIN_PLURAL}.{keys.COMPUTE_DOMAIN_GROUP} "
        f"({keys.COMPUTE_DOMAIN_API_VERSION}): install the NVIDIA DRA driver for GPUs (kubectl mnnvl doctor says more)"
    )
