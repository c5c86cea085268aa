"""Deny mode: refuse the DELETE of a managed ComputeDomain while non-terminal pods reference it.

A finalizer cannot stop the NVIDIA driver's teardown, which starts as soon as a domain is marked for
deletion; refusing the request can. The check reads the pods afresh: a deletion must never slip through a
watch cache that is a moment behind.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_api.decisions import domains
from mnnvl_api.models import configuration
from mnnvl_runtime import admission, operator
from mnnvl_runtime import domains as writing

from . import planner, state, telemetry

log = logging.getLogger(__name__)


@kopf.on.validate(
    keys.COMPUTE_DOMAIN_GROUP,
    keys.COMPUTE_DOMAIN_VERSION,
    keys.COMPUTE_DOMAIN_PLURAL,
    operation="DELETE",
    id="validate-computedomain-delete",
    registry=state.registry,
)
async def refuse_in_use_deletion(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
    context = operator.context_of(memo)
    with admission.measured("validate-computedomain-delete", kwargs.get("operation")):
        if context.configuration.compute_domain.deletion_protection is not configuration.DeletionProtection.DENY:
            return
        domain = domains.facts_of(body)
        if not domain.managed:
            return
        users = await writing.users_of(context.client, domain)
        reason = planner.refusal(domain, users)
        if reason is not None:
            telemetry.REFUSALS.inc()
            log.info("deletion refused", extra={"namespace": domain.namespace, "compute_domain": domain.name})
            raise kopf.AdmissionError(reason, code=403)
