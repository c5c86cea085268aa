"""Deny mode: refuse the DELETE of a managed ComputeDomain while non-terminal pods reference it.

A finalizer cannot stop the NVIDIA driver's teardown, which starts as soon as a domain is marked for
deletion; refusing the request can. The answer comes from the guardian's own stores, read afresh only where it
matters, so that deleting a namespace or cleaning up thousands of domains does not list pods once per domain:

- the stores name pods using the domain: each is read with a GET (cheap), and the deletion is refused naming
  those that still use it, apart from those stuck Terminating (with the command that lets them go);
- the stores name none (or none of those named still uses it): a deletion must never slip through a watch
  cache that is a moment behind, or past a pod our scope label does not mark, so the namespace's pods are
  listed afresh, through the domain writer's limiter of fresh lists, before it is allowed.

The whole check is bounded well inside the webhook's timeout; a check that cannot finish in time refuses.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Iterable
from typing import Any, Final

import kopf

from mnnvl_api import keys
from mnnvl_api.decisions import domains, references
from mnnvl_api.models import configuration
from mnnvl_runtime import admission, controller, domain_writer, kube

from . import planner, state, telemetry

log = logging.getLogger(__name__)
#: The longest a check may take: inside the chart's 10 s webhook timeout, with room for the API server's side.
CHECK_SECONDS: Final = 7.0
#: How many pods the stores name are read back (each with a GET, all at once): one still using the domain is
#: enough to refuse, and a few name it well.
VERIFIED_PODS: Final = 16


@kopf.on.validate(
    keys.COMPUTE_DOMAIN_GROUP,
    keys.COMPUTE_DOMAIN_VERSION,
    keys.COMPUTE_DOMAIN_PLURAL,
    operations={"DELETE"},
    id="validate-computedomain-delete",
    registry=state.registry,
)
async def refuse_in_use_deletion(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
    context = controller.context_of(memo)
    with admission.measured("validate-computedomain-delete", kwargs.get("operation")):
        if context.configuration.compute_domain.deletion_protection is not configuration.DeletionProtection.DENY:
            return
        domain = domains.facts_of(body)
        if not domain.managed:
            return
        reads: state.DenyReads = memo["deny_reads"]
        indexed = reads.stores.shared.users(domain) if reads.synced.is_set() else []
        reason = await bounded_refusal(context.client, reads.writer, domain, indexed)
        if reason is not None:
            telemetry.REFUSALS.inc()
            log.info("deletion refused", extra={"namespace": domain.namespace, "compute_domain": domain.name})
            raise kopf.AdmissionError(reason, code=403)


async def bounded_refusal(
    client: kube.Api,
    writer: domain_writer.DomainWriter,
    domain: domains.DomainFacts,
    indexed: list[str],
    *,
    within: float = CHECK_SECONDS,
) -> str | None:
    """`deletion_refusal` within `within` seconds; a check that fails or does not finish in time refuses."""
    try:
        return await asyncio.wait_for(deletion_refusal(client, writer, domain, indexed), within)
    except (TimeoutError, kube.ApiError) as error:
        log.warning("in-use check failed", extra={"compute_domain": domain.name, "error": str(error)})
        return planner.unverified(domain, within)


async def deletion_refusal(
    client: kube.Api, writer: domain_writer.DomainWriter, domain: domains.DomainFacts, indexed: list[str]
) -> str | None:
    """Why the deletion is refused (None: allowed): the pods the stores name, read back; if none still uses the
    domain, those a fresh list of the namespace's pods names, read back likewise. Beyond the first
    `VERIFIED_PODS`, named pods are counted as using it unread."""
    named = indexed
    users = await still_using(client, domain, named[:VERIFIED_PODS])
    if not users:
        named = await writer.fresh_users(domain)
        users = await still_using(client, domain, named[:VERIFIED_PODS])
    if not users:
        return None
    now = datetime.datetime.now(datetime.UTC)
    lost = await lost_nodes(client, (pod for pod in users if pod["metadata"].get("deletionTimestamp")))
    return planner.refusal(
        domain,
        [*(pod["metadata"]["name"] for pod in users), *named[VERIFIED_PODS:]],
        stuck=[pod["metadata"]["name"] for pod in users if planner.is_stuck(pod, now=now, lost_nodes=lost)],
    )


async def still_using(client: kube.Api, domain: domains.DomainFacts, names: list[str]) -> list[kube.Object]:
    """The pods among `names`, each read afresh, that still use the domain."""
    found = await asyncio.gather(*(client.aget("v1", "pods", name, namespace=domain.namespace) for name in names))
    return [
        pod
        for pod in found
        if pod is not None and references.uses(pod, domain=domain.name, claim_template=domain.claim_template)
    ]


async def lost_nodes(client: kube.Api, terminating: Iterable[kube.Object]) -> frozenset[str]:
    """The nodes of `terminating` pods that are gone or not Ready: their pods cannot finish on their own."""
    nodes = sorted({name for pod in terminating if (name := (pod.get("spec") or {}).get("nodeName"))})
    found = await asyncio.gather(*(client.aget("v1", "nodes", name) for name in nodes))
    return frozenset(name for name, node in zip(nodes, found, strict=True) if planner.node_lost(node))
