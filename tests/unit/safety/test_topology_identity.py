"""mnnvl-topology never writes what its installation did not make, and two installations do not fight.

Hypothesis draws a cluster of Topologies and bindings under a few names — this installation's, another
installation's, an earlier version's (our field manager, no installation recorded), copied manifests (labelled ours,
written by kubectl, with or without an installation annotation), earlier versions' objects annotated by someone
else, a user's, Grove's — and two configurations, then runs the two installations' executors (planner decisions,
the fake API server recording field managers) against each other's output, round after round; in the first round,
someone else may take over (apply the identity of) any object an installation has just read, before its write
lands, so a write not conditioned on the version read is caught. Who made each object is the test's own record,
not the planner's verdict, so a planner that trusts a label is caught.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mnnvl_api import keys
from mnnvl_topology import passes, topologies, topology_writer

from ..mnnvl_topology.fake_api import IDENTIFIED, FakeApi, entry, passes_over, stored, take_ownership, topologies_seen
from . import settings as safety_settings
from .worlds import mostly

Object = dict[str, Any]
A = "mnnvl-system/mnnvl"
B = "team-b/mnnvl"
NAMES = ("t0", "t1", "t2")
LEVEL_CHOICES = (
    ({"nodeLabel": keys.GPU_CLIQUE_LABEL}, {"nodeLabel": keys.HOSTNAME_LABEL}),
    ({"nodeLabel": keys.HOSTNAME_LABEL},),
    ({"nodeLabel": "example.com/rack"}, {"nodeLabel": keys.GPU_CLIQUE_LABEL}, {"nodeLabel": keys.HOSTNAME_LABEL}),
)
#: Who made an object: one of the installations, an earlier version of ours, or anyone else.
LEGACY = "legacy"
FOREIGN = "foreign"
MAKERS = ("A", "B", "legacy", "copied-A", "copied-B", "copied-bare", "annotated-A", "annotated-B", "user", "grove")
ROUNDS = 3
#: The KAI v0.17 schema (aliases), as far as `topologies.schema_has_aliases` reads it.
ALIASED_CRD = {
    "spec": {
        "versions": [
            {
                "name": keys.KAI_TOPOLOGY_VERSION,
                "schema": {"openAPIV3Schema": {"properties": {"spec": {"properties": {"levels": {"items": {
                    "properties": {"alias": {}, "nodeLabel": {}}}}}}}}},
            }
        ]
    }
}  # fmt: skip


def made(maker: str, manifest: Object) -> tuple[Object, str]:
    """The object `maker` wrote from our desired `manifest` (which records installation A), and who made it."""
    meta = manifest["metadata"]
    bare: Object = {**manifest, "metadata": {"name": meta["name"], "labels": dict(topologies.OURS)}}
    annotation = {keys.INSTALLATION_ANNOTATION: B if maker.endswith("B") else A}
    recorded: Object = {**manifest, "metadata": {**meta, "annotations": annotation}}
    if maker in ("A", "B"):
        return stored(recorded, manager=keys.TOPOLOGY_CONTROLLER), {"A": A, "B": B}[maker]
    if maker == LEGACY:
        return stored(bare, manager=keys.TOPOLOGY_CONTROLLER), LEGACY
    if maker.startswith("copied-"):
        return stored(bare if maker == "copied-bare" else recorded, manager="kubectl"), FOREIGN
    if maker.startswith("annotated-"):  # an earlier version's object, the annotation added by hand
        managers = {keys.INSTALLATION_ANNOTATION: "kubectl-annotate"}
        return stored(recorded, managers=managers, manager=keys.TOPOLOGY_CONTROLLER), FOREIGN
    unlabelled: Object = {**manifest, "metadata": {"name": meta["name"]}}
    if maker == "grove":
        unlabelled["metadata"]["ownerReferences"] = [
            {"apiVersion": keys.GROVE_API_VERSION, "kind": keys.GROVE_BINDING_KIND, "name": meta["name"],
             "uid": "grove-binding", "controller": True}
        ]  # fmt: skip
    return stored(unlabelled, manager="someone"), FOREIGN


@dataclasses.dataclass(frozen=True)
class Seed:
    kind: str  # topologies.Action-free: the plural
    name: str
    maker: str
    levels: int


@st.composite
def clusters(draw: st.DrawFn) -> list[Seed]:
    seeds: list[Seed] = []
    for name in NAMES:
        for plural, object_name in ((keys.KAI_TOPOLOGY_PLURAL, name), (keys.GROVE_BINDING_PLURAL, f"{name}-binding")):
            maker = draw(st.none() | st.sampled_from(MAKERS))
            if maker is not None:
                levels = draw(st.integers(0, len(LEVEL_CHOICES) - 1))
                seeds.append(Seed(plural, object_name, maker, levels))
    return seeds


@st.composite
def configurations(draw: st.DrawFn) -> list[Object]:
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=len(NAMES)))
    return [
        {
            "name": name,
            "levels": [dict(level) for level in LEVEL_CHOICES[draw(st.integers(0, len(LEVEL_CHOICES) - 1))]],
            "groveBinding": {"enabled": draw(st.booleans())},
        }
        for name in names
    ]


def seeded(seed: Seed) -> tuple[Object, str]:
    topology = entry(seed.name.removesuffix("-binding"), [dict(level) for level in LEVEL_CHOICES[seed.levels]])
    if seed.kind == keys.KAI_TOPOLOGY_PLURAL:
        return made(seed.maker, topologies.desired_topology(topology, aliases=False, installation=A))
    binding = topologies.desired_binding(topology, installation=A)
    assert binding is not None
    return made(seed.maker, binding)


class Racing(FakeApi):
    """The API server as one installation sees it, where someone else may take over the object the installation has
    just read (applying its identity as `kubectl`) before the installation's write lands: `takes_over` says when."""

    def __init__(self, *, objects: dict[tuple[str, str], Object], made_by: dict[str, str]) -> None:
        super().__init__(refuse=set(), objects=objects)
        self.made_by = made_by
        self.takes_over: Callable[[], bool] = never

    async def aget(self, api_version: str, plural: str, name: str, *, namespace: str | None = None) -> Object | None:
        found = await super().aget(api_version, plural, name, namespace=namespace)
        current = self.objects.get((plural, name))
        if current is not None and plural in IDENTIFIED and self.takes_over():
            meta = current["metadata"]
            identity = {section: dict(meta[section]) for section in ("labels", "annotations") if meta.get(section)}
            take_ownership(meta, "kubectl", identity)
            meta["resourceVersion"] = f"{meta['resourceVersion']}-taken"
            self.made_by[meta["uid"]] = FOREIGN
        return found


def taken_over(data: st.DataObject) -> bool:
    return data.draw(mostly(False, True), label="taken over")


def never() -> bool:
    return False


@dataclasses.dataclass
class Installation:
    identity: str
    entries: list[Object]
    api: Racing
    running: passes.Passes

    def configured(self, plural: str) -> set[str]:
        if plural == keys.KAI_TOPOLOGY_PLURAL:
            return {item["name"] for item in self.entries}
        return {f"{item['name']}-binding" for item in self.entries if item["groveBinding"]["enabled"]}

    def sync(self) -> list[tuple[str, str, Object | None, Object | None]]:
        """One pass, as the Lease holder runs it; the writes it made."""
        self.api.writes.clear()
        self.running.topologies.stores = topologies_seen(self.api)
        with contextlib.suppress(topology_writer.IncompletePassError):  # a write refused: the object changed hands
            asyncio.run(self.running.topologies.sync())
        return list(self.api.writes)


def check(made_by: dict[str, str], installation: Installation, writes: list[Any]) -> None:
    """Each write touched only what this installation made, or adopted an earlier version's object under a name it
    is configured with; the record of who made what follows the writes."""
    me = installation.identity
    for verb, plural, before, after in writes:
        if before is not None:
            meta = before["metadata"]
            maker = made_by[meta["uid"]]
            adoptable = maker == LEGACY and meta["name"] in installation.configured(plural)
            assert maker == me or adoptable, f"{me} {verb}d {plural} {meta['name']} made by {maker}"
        if after is not None:
            made_by[after["metadata"]["uid"]] = me


@safety_settings.for_property(max_examples=300)
@given(clusters(), configurations(), configurations(), st.booleans(), st.data())
def test_two_installations_write_only_their_own_objects_and_converge(
    seeds: list[Seed], first: list[Object], second: list[Object], aliases: bool, data: st.DataObject
) -> None:
    objects: dict[tuple[str, str], Object] = {}
    made_by: dict[str, str] = {}
    for seed in seeds:
        body, maker = seeded(seed)
        objects[(seed.kind, seed.name)] = body
        made_by[body["metadata"]["uid"]] = maker
    if aliases:
        objects[("customresourcedefinitions", keys.KAI_TOPOLOGY_CRD)] = ALIASED_CRD
    installations = []
    for identity, entries in ((A, first), (B, second)):
        api = Racing(objects=objects, made_by=made_by)
        running = passes_over(api, topologies=entries, installation=identity)
        installations.append(Installation(identity, entries, api, running))

    last_round: list[Any] = []
    for round_ in range(ROUNDS):
        last_round = []
        for installation in installations:
            # objects change hands under the first round's reads; the later rounds must converge
            racing = round_ == 0 and data.draw(st.booleans(), label="someone takes objects over")
            installation.api.takes_over = functools.partial(taken_over, data) if racing else never
            writes = installation.sync()
            check(made_by, installation, writes)
            last_round += writes

    assert last_round == [], "the installations still write after converging: they fight"
    for installation in installations:  # every configured name is held: by its own object, or someone else's
        for plural in (keys.KAI_TOPOLOGY_PLURAL, keys.GROVE_BINDING_PLURAL):
            wanted = installation.configured(plural)
            if plural == keys.GROVE_BINDING_PLURAL:  # no binding for a Topology held by someone else
                wanted = {
                    name
                    for name in wanted
                    if made_by[objects[(keys.KAI_TOPOLOGY_PLURAL, name.removesuffix("-binding"))]["metadata"]["uid"]]
                    in (installation.identity,)
                }
            assert wanted <= {name for kind, name in objects if kind == plural}


def always() -> bool:
    return True


@safety_settings.for_property(max_examples=100)
@given(st.data())
def test_no_write_lands_on_an_object_taken_over_since_it_was_read(data: st.DataObject) -> None:
    """The race the property above draws now and then, on its own: every Topology and binding this installation
    made, or an earlier version made, is taken over by someone else between the installation's read and its write.
    Adopting, repairing or recreating it must fail on the change (a precondition), never land on the new owner's."""
    objects: dict[tuple[str, str], Object] = {}
    made_by: dict[str, str] = {}
    for name in NAMES:
        for plural, object_name in ((keys.KAI_TOPOLOGY_PLURAL, name), (keys.GROVE_BINDING_PLURAL, f"{name}-binding")):
            maker = data.draw(st.sampled_from(("A", LEGACY)), label=f"{object_name} made by")
            levels = data.draw(st.integers(0, len(LEVEL_CHOICES) - 1), label=f"{object_name} levels")
            body, made_as = seeded(Seed(plural, object_name, maker, levels))
            objects[(plural, object_name)] = body
            made_by[body["metadata"]["uid"]] = made_as
    if data.draw(st.booleans(), label="aliases served"):
        objects[("customresourcedefinitions", keys.KAI_TOPOLOGY_CRD)] = ALIASED_CRD
    configured = [dict(level) for level in LEVEL_CHOICES[0]]
    entries = [{"name": name, "levels": configured, "groveBinding": {"enabled": True}} for name in NAMES]
    api = Racing(objects=objects, made_by=made_by)
    installation = Installation(A, entries, api, passes_over(api, topologies=entries, installation=A))
    api.takes_over = always

    check(made_by, installation, installation.sync())
