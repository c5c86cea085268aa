"""One name per controller, and everything derived from it, so two controllers never share bookkeeping."""

from __future__ import annotations

import dataclasses

#: The domain under which a controller keeps its own kopf bookkeeping (finalizer, annotations).
BOOKKEEPING_DOMAIN = "mnnvl.dev"


@dataclasses.dataclass(frozen=True)
class Identity:
    """A controller's name: its console script, Deployment, Lease, field manager and event source."""

    name: str

    @property
    def field_manager(self) -> str:
        return self.name

    @property
    def lease_name(self) -> str:
        return self.name

    @property
    def reporting_component(self) -> str:
        return self.name

    @property
    def bookkeeping_prefix(self) -> str:
        """Prefix of kopf's annotations and finalizer for this controller, e.g. `mnnvl-lws.mnnvl.dev`."""
        return f"{self.name}.{BOOKKEEPING_DOMAIN}"

    @property
    def kopf_finalizer(self) -> str:
        return f"{self.bookkeeping_prefix}/finalizer"
