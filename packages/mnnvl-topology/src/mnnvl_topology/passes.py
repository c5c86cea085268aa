"""mnnvl-topology's queue passes: each work key to its writing half (`topology_writer`, `census_writer`,
`fit_warner`), and what a resync or a Lease change makes them forget. Only the Lease holder runs these."""

from __future__ import annotations

from mnnvl_runtime import controller

from . import census_writer, fit_warner, state, topologies, topology_writer


class Passes:
    def __init__(
        self,
        context: controller.Context,
        stores: state.Stores,
        *,
        unwatched: frozenset[topologies.OptionalApi] = frozenset(),
    ) -> None:
        self.stores = stores
        self.topologies = topology_writer.TopologyWriter(context, stores, unwatched=unwatched)
        self.census = census_writer.CensusWriter(context, stores)
        self.fit = fit_warner.FitWarner(context, stores)

    async def work(self, key: state.Key) -> None:
        if key == state.TOPOLOGIES:
            await self.topologies.sync()
        elif key == state.CENSUS:
            await self.census.publish()
        elif key[0] == state.FIT:
            await self.fit.check(key[1], key[2])

    def on_resync(self) -> None:
        """After every periodic resync: the census is applied again (the ConfigMap may have been deleted or edited
        since), and the fit checks read afresh."""
        self.census.forget()
        self.fit.on_resync()

    def on_lease_change(self, leading: bool) -> None:
        if leading:  # another replica wrote the census and may have posted Warnings while it held the Lease
            self.census.forget()
            self.fit.posted.clear()
