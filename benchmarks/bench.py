"""`./dev bench [scenario] [arguments]`: one entry point for every benchmark.

Scenarios:
  stores   (the default) per-event cost of each controller on in-memory clusters of growing size; no testbed
  ungate   bursts of new groups: time to mnnvl's gate removal against upstream LWS's worker StatefulSet, and
           the NVIDIA driver's part of that time (domain to claim template)
  restart  restarted, rolled and added groups of a running LWS: the same, per new leader incarnation
  slices   bursts of DisaggregatedSet slices: time to mnnvl-ds's gate removal per leader, against upstream's
           worker StatefulSet
  writes   API writes per group lifecycle by mnnvl-lws and mnnvl-guardian, from the API server's audit log
  webhook  latency mnnvl's pod webhook adds to pod creation at a steady rate
  memory   RSS of mnnvl-lws and mnnvl-guardian against the LWS manager's, idle and with thousands of pods
  topology-memory
           RSS of mnnvl-topology against the LWS manager's, idle and with tens of thousands of unrelated pods
  cli      kubectl mnnvl status, gc and explain with thousands of pods, against one list of the same pods

`./dev bench <scenario> --help` lists a scenario's arguments. Testbed scenarios start (or reuse) a testbed of
their own with the controllers running, and write a PNG plot (`--plot`, default under benchmarks/out/).
"""

from __future__ import annotations

import faulthandler
import importlib
import signal
import sys

SCENARIOS = {
    "stores": "watch_stores",
    "ungate": "ungate",
    "restart": "restart",
    "slices": "slices",
    "writes": "writes",
    "webhook": "webhook",
    "memory": "memory",
    "topology-memory": "topology_memory",
    "cli": "cli",
}


def main(argv: list[str]) -> None:
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` shows where a long run is
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    scenario = argv[0] if argv and not argv[0].startswith("-") else "stores"
    arguments = argv[1:] if argv and argv[0] == scenario else argv
    if scenario not in SCENARIOS:
        sys.exit(f"unknown scenario {scenario!r}; choose one of: {', '.join(SCENARIOS)}")
    module = importlib.import_module(SCENARIOS[scenario])
    sys.argv = [f"bench {scenario}", *arguments]
    module.main()


if __name__ == "__main__":
    main(sys.argv[1:])
