"""What the chaos run holds against a refusal: only requests about workloads it never saw opted in count as plain."""

from __future__ import annotations

import dataclasses

from mnnvl_testbed import chaos, churn

PLAIN = churn.Workload(
    kind=churn.LWS, namespace="n", name="plain-lws-1", shape="gpu-leader", opted_in=False, never_opted_in=True,
    replicas=1, size=2,
)  # fmt: skip


def test_a_workload_once_seen_opted_in_is_not_plain_for_the_rest_of_the_run() -> None:
    tally = chaos.Tally()
    tally.observe([PLAIN, dataclasses.replace(PLAIN, name="plain-lws-12")])
    assert tally.plain("plain-lws-1")  # its leader StatefulSet
    assert tally.plain("plain-lws-1-0")  # a group's worker StatefulSet
    tally.observe([dataclasses.replace(PLAIN, opted_in=True, never_opted_in=False)])
    tally.observe([dataclasses.replace(PLAIN, never_opted_in=False)])  # opted out again: its pods were opted in
    assert not tally.plain("plain-lws-1-0")
    assert tally.plain("plain-lws-12-0")  # a longer name is another workload
    assert not tally.plain("lws-3-0")
