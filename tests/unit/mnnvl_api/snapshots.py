"""What every scope's snapshot builder (`plans.ScopeSnapshot`) fills in the same way in tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from mnnvl_api import names
from mnnvl_api.decisions import domains


def domain_fields(
    found: Sequence[domains.DomainFacts],
    *,
    templates: Iterable[str] | None,
    in_use: Iterable[str],
    recorded: Iterable[str],
) -> dict[str, Any]:
    """The domains by name; the claim templates that exist (every found domain's unless `templates` says which);
    those held by pods (of the domains named `in_use`) and the domains pods record."""
    return {
        "domains": {d.name: d for d in found},
        "existing_templates": frozenset(templates if templates is not None else (d.claim_template for d in found)),
        "templates_in_use": frozenset(names.claim_template_name(name) for name in in_use),
        "domains_recorded": frozenset(recorded),
    }
