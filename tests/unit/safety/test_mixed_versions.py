"""Mixed versions: the interleaving models with one replica running the baseline's code and the other the current
code, as during a rolling upgrade (or its rollback) of a controller with two replicas (issue 26).

The baseline is the tree the upgrade tests start from (`mnnvl_testbed.baseline.UPGRADE_BASELINE`), loaded in this
process under module objects of its own (`versions`): its stores, planner, executor, domain writer and webhooks
are the baseline's, the other replica's the current code's, over one in-memory API server. Everything the models
interleave stays: Lease hand-overs between the two versions (the deposed leader's writes landing after the new one
started), pod webhooks of either version, the workload webhooks answered by each version in turn (`harness.
ControllerMachine.serving`: the mutating and validating calls of one write meet every pair of versions), stale
stores, restarts (a replica restarts in its own version). The invariants are the models' own, judged by the current
code's account of the contract, so a change of a contract between the versions (a label, an annotation, a name, a
finalizer, a stamp, a decision the other version relies on) that breaks the promise fails them here before it
ships, though each version alone is safe. They judge safety only: a change that leaves a workload waiting forever
(a group whose domain the other version never recognises stays gated) passes.

Each controller runs both orders: `Upgrade` (replica a, which leads first and makes the running workloads' domains,
runs the baseline) and `Rollback` (replica a runs the current code, b the baseline). The searches are smaller than
the models' own (CI's budget), and derandomized like theirs (`settings`).

`test_a_contract_change_between_versions_is_caught` proves the point: an old version whose owner-uid label key
differs (a copy of the baseline edited in `tmp_path`) fails the upgrade's replica-scope run.
"""

from __future__ import annotations

import inspect
import pathlib
import shutil
from collections.abc import Callable
from typing import Any, TypeVar, cast

import hypothesis
import pytest
from hypothesis import Phase
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from mnnvl_api import keys
from mnnvl_guardian import handlers, state
from mnnvl_runtime import domain_writer
from mnnvl_testbed import baseline as baselines

from ..mnnvl_runtime.memory_api import MemoryClient, Object
from . import settings, versions
from .harness import HAND_OVER_RULES, REPLICAS, ControllerMachine, Replica, campaign
from .test_guardian_interleavings import GuardianModel, Process
from .test_interleavings import POD_RULES, ReplicaScope
from .test_slice_interleavings import SliceScope
from .versions import Version

MachineT = TypeVar("MachineT", bound=RuleBasedStateMachine)


def mixed(
    machine: type[MachineT],
    name: str,
    *,
    old_runs_on: str,
    old: Callable[[], Version] = versions.baseline,
    max_examples: int,
    steps: int,
) -> type[MachineT]:
    """`machine` whose replica `old_runs_on` runs the `old` version's code (each time its process starts), the
    other replica the current code; searched with `max_examples` runs of `steps` steps."""
    assert issubclass(machine, ControllerMachine)

    def version_of(self: ControllerMachine[Any, Any], replica: str) -> Version:
        return old() if replica == old_runs_on else versions.CURRENT

    staged = cast(type[MachineT], type(f"{machine.__name__}{name}", (machine,), {"version_of": version_of}))
    staged.TestCase.settings = settings.for_model(max_examples=max_examples, steps=steps)
    return staged


OLD_FIRST, NEW_FIRST = REPLICAS[0], REPLICAS[1]

# --- mnnvl-lws (replica scope) ---------------------------------------------------------------------------------

ReplicaUpgrade = mixed(ReplicaScope, "Upgrade", old_runs_on=OLD_FIRST, max_examples=80, steps=80)
test_replica_scope_upgrade = ReplicaUpgrade.TestCase
ReplicaRollback = mixed(ReplicaScope, "Rollback", old_runs_on=NEW_FIRST, max_examples=80, steps=80)
test_replica_scope_rollback = ReplicaRollback.TestCase
#: Hand-overs between the versions with passes and writes in flight, pods admitted by either meanwhile.
ReplicaUpgradeHandOvers = campaign(ReplicaUpgrade, "HandOvers", rules=(*POD_RULES, *HAND_OVER_RULES), max_examples=80)
test_replica_scope_upgrade_hand_overs = ReplicaUpgradeHandOvers.TestCase

# --- mnnvl-ds (slice scope) ------------------------------------------------------------------------------------

SliceUpgrade = mixed(SliceScope, "Upgrade", old_runs_on=OLD_FIRST, max_examples=60, steps=80)
test_slice_scope_upgrade = SliceUpgrade.TestCase
SliceRollback = mixed(SliceScope, "Rollback", old_runs_on=NEW_FIRST, max_examples=60, steps=80)
test_slice_scope_rollback = SliceRollback.TestCase

# --- mnnvl-guardian --------------------------------------------------------------------------------------------


class VersionedGuardian(GuardianModel):
    """`GuardianModel` whose processes, and their Deny webhooks, run the code of their replica's version: the model's
    own steps (`new_process`, `webhook_allows`), their names of our packages resolved in that version
    (`Version.rebound`). The model's source is left as it is, since its search (derived from that source) is what
    the guards' runs rely on."""

    def new_process(
        self,
        writer: domain_writer.DomainWriter,
        client: MemoryClient,
        may_write: Callable[[], bool],
        found: state.Stores,
    ) -> Process:
        steps = self.version_of(client.sender).rebound(GuardianModel.new_process)
        return steps(self, writer, client, may_write, found)

    def webhook_allows(
        self, replica: Replica[state.Stores, Process], domain: Object, *, check: str, synced: bool
    ) -> bool:
        steps = replica.version.rebound(GuardianModel.webhook_allows)
        return steps(self, replica, domain, check=check, synced=synced)


GuardianUpgrade = mixed(VersionedGuardian, "Upgrade", old_runs_on=OLD_FIRST, max_examples=100, steps=25)
test_guardian_upgrade = GuardianUpgrade.TestCase
GuardianRollback = mixed(VersionedGuardian, "Rollback", old_runs_on=NEW_FIRST, max_examples=100, steps=25)
test_guardian_rollback = GuardianRollback.TestCase


# --- the mechanism itself --------------------------------------------------------------------------------------


def test_each_replica_runs_the_code_of_its_version() -> None:
    """The old replica's stores, writer, executor (and the guardian's process) are the baseline's classes, loaded
    from its tree, the other's the current code's: the mixed runs really run two versions, even while the two trees
    are equal."""
    old_version, tree = versions.baseline(), baselines.tree().resolve()

    def of_baseline(made: type) -> bool:
        return pathlib.Path(inspect.getfile(old_version.module(made.__module__))).resolve().is_relative_to(tree)

    scope_model = ReplicaUpgrade()
    guardian_model = GuardianUpgrade()
    guardian_model.start()
    try:
        for model in (scope_model, guardian_model):
            old, new = model.replicas[OLD_FIRST], model.replicas[NEW_FIRST]
            assert (old.version, new.version) == (old_version, versions.CURRENT)
            for part in ("stores", "writer", "executor"):
                made = type(getattr(new, part))
                assert type(getattr(old, part)) is old_version.counterpart(made), f"{old.name}'s {part}"
            assert of_baseline(type(old.writer))
            assert not pathlib.Path(inspect.getfile(type(new.writer))).resolve().is_relative_to(tree)
        guardians = [guardian_model.replicas[name].executor.guardian for name in (OLD_FIRST, NEW_FIRST)]
        assert [type(guardian) for guardian in guardians] == [
            old_version.counterpart(handlers.Guardian),
            handlers.Guardian,
        ]
        assert old_version.counterpart(handlers.Guardian) is not handlers.Guardian
    finally:
        scope_model.teardown()
        guardian_model.teardown()


#: The baseline's file of the contract's keys, and the owner-uid label's definition in it.
KEYS = "packages/mnnvl-api/src/mnnvl_api/keys.py"
OWNER_UID_DEFINITION = f'OWNER_UID_LABEL: Final = "{keys.OWNER_UID_LABEL}"'


def changed_baseline(into: pathlib.Path, path: str, find: str, replace: str) -> Version:
    """The baseline's packages copied `into` a directory, with `find` replaced in its file `path`, loaded as a
    version of their own: an old version that differs from the current code by that change."""
    tree = baselines.tree()
    for source in baselines.package_sources(tree):
        if any((source / package).is_dir() for package in versions.PACKAGES):
            shutil.copytree(source, into / source.relative_to(tree))
    changed = into / path
    text = changed.read_text()
    assert text.count(find) == 1, f"{find!r} does not occur once in the baseline's {path}: update the edit"
    changed.write_text(text.replace(find, replace))
    return versions.load(into, name=f"the baseline changed in {path}")


def test_a_contract_change_between_versions_is_caught(tmp_path: pathlib.Path) -> None:
    """An old version that labels its domains' owner under another key than the current code fails the replica
    scope's upgrade run: a domain it creates names no owner the contract knows (and the current replica would
    never take it for the workload's). Each version alone is consistent; only the two together break the
    promise, and the mixed run says so."""
    renamed = OWNER_UID_DEFINITION.replace("compute-domain-owner-uid", "compute-domain-owner")
    old = changed_baseline(tmp_path, KEYS, OWNER_UID_DEFINITION, renamed)
    assert old.module("mnnvl_api.keys").OWNER_UID_LABEL != keys.OWNER_UID_LABEL
    machine = mixed(ReplicaScope, "ChangedUpgrade", old_runs_on=OLD_FIRST, old=lambda: old, max_examples=50, steps=80)
    search = hypothesis.settings(
        machine.TestCase.settings, phases=[Phase.generate], report_multiple_bugs=False, print_blob=False
    )
    with pytest.raises(AssertionError, match=r"sent create computedomains/\S+ for None, while dsr1 is uid-"):
        run_state_machine_as_test(machine, settings=search)
