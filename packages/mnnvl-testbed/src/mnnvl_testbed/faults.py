"""The chaos run's faults, each on its own seeded schedule, each undone by itself (a killed replica is started
again as its Deployment would, a paused process resumed, the API server started again, the webhooks healed).

A fault runs in a thread of its own, so faults overlap as they would in a bad hour; a fault whose previous run is
still going skips its turn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable

from mnnvl_api import keys

from . import cluster, controllers, dra_driver, processes, proxy, release

log = logging.getLogger(__name__)

#: Controllers run with two replicas, as the chart deploys them.
REPLICATED = (keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER)
#: Past the testbed's Lease duration (6 s): a paused leader's Lease expires and another replica takes over.
LEADER_PAUSE_SECONDS = 10.0
#: Beyond the chart's webhook timeoutSeconds (10).
WEBHOOK_SLOW_SECONDS = 12.0


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str
    #: Mean seconds between two runs (each wait drawn uniformly from half to one and a half of it).
    every: float
    run: Callable[[random.Random], str]


class Faults:
    def __init__(self, testbed: cluster.Testbed, proxies: dict[str, proxy.WebhookProxy], seed: int) -> None:
        self.testbed = testbed
        self.proxies = proxies
        self.supervisor = processes.Supervisor(testbed.state_dir)
        self.rng = random.Random(seed)
        self.done: Counter[str] = Counter()
        #: Components of the control plane found exited and started again, by name.
        self.restarted: Counter[str] = Counter()
        self.stopping = threading.Event()
        self._busy: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.schedule = [
            Fault("kill-leader", 45, self.kill_leader),
            Fault("kill-follower", 60, self.kill_follower),
            Fault("pause-leader", 70, self.pause_leader),
            Fault("restart-apiserver", 110, self.restart_apiserver),
            Fault("pause-etcd", 80, self.pause_etcd),
            Fault("slow-webhook", 75, self.slow_webhook),
            Fault("webhook-down", 65, self.webhook_down),
            Fault("slow-driver", 55, self.slow_driver),
        ]

    # --- scheduling -------------------------------------------------------------------------------------------

    def run(self) -> None:
        """Until `stopping`: start each fault when its turn comes."""
        start = time.monotonic()
        due = {fault.name: start + self.rng.uniform(5, fault.every) for fault in self.schedule}
        kubelet_due = start
        while not self.stopping.wait(0.5):
            now = time.monotonic()
            if now >= kubelet_due:
                kubelet_due = now + 5
                self.restart_exited()
            for fault in self.schedule:
                if now >= due[fault.name]:
                    due[fault.name] = now + self.rng.uniform(0.5, 1.5) * fault.every
                    self._start(fault, random.Random(self.rng.random()))

    def _start(self, fault: Fault, rng: random.Random) -> None:
        with self._lock:
            if fault.name in self._busy:
                return
            self._busy.add(fault.name)

        def body() -> None:
            try:
                what = fault.run(rng)
                log.warning("fault %s: %s", fault.name, what)
                with self._lock:
                    self.done[fault.name] += 1
            except Exception as error:  # a fault that cannot be done now (the API server is down) is skipped
                log.warning("fault %s not done: %s", fault.name, error)
            finally:
                with self._lock:
                    self._busy.discard(fault.name)

        thread = threading.Thread(target=body, name=fault.name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def settle(self, timeout: float = 180) -> None:
        """Stop scheduling, let every running fault undo itself, and make sure every replica is up."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.1))
        for item in self.proxies.values():
            item.mode = proxy.PASS
        # kube-controller-manager's garbage collector can stall after the API server restarts (upstream): pods of a
        # deleted LeaderWorkerSet stay, orphaned, until it is restarted (the first soak found it; a restart collected
        # them within seconds). Orphans are the collector's to delete, not mnnvl's, so it starts afresh here.
        self.supervisor.kill("kube-controller-manager")
        self.restart_exited()
        for controller in REPLICATED:
            for replica in controllers.started_replicas(self.testbed, controller):
                if not self.supervisor.alive(replica.name):
                    controllers.revive(self.testbed, controller, replica)

    def restart_exited(self) -> None:
        """What kubelets do: start again the control plane's components that exited."""
        try:
            restarted = cluster.restart_exited(self.testbed)
        except processes.ComponentError as error:
            log.warning("could not restart a component: %s", error)
            return
        for name in restarted:
            log.warning("%s had exited: started again", name)
            self.restarted[name] += 1

    # --- the faults -------------------------------------------------------------------------------------------

    def _holder(self, controller: str) -> str | None:
        lease = self.testbed.api().get("coordination.k8s.io/v1", "leases", controller, namespace=release.NAMESPACE)
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return str(holder) if holder else None

    def _replica(self, rng: random.Random, *, leading: bool) -> tuple[str, controllers.Replica] | None:
        controller = rng.choice(REPLICATED)
        holder = self._holder(controller)
        replicas = [
            r
            for r in controllers.started_replicas(self.testbed, controller)
            if (r.name == holder) == leading and self.supervisor.alive(r.name)
        ]
        return (controller, rng.choice(replicas)) if replicas else None

    def _kill(self, rng: random.Random, *, leading: bool) -> str:
        chosen = self._replica(rng, leading=leading)
        if chosen is None:
            return "no such replica up"
        controller, replica = chosen
        self.supervisor.kill(replica.name)
        # The Deployment starts a crashed pod again after a back-off.
        self.stopping.wait(rng.uniform(1, 6))
        controllers.revive(self.testbed, controller, replica)
        return f"SIGKILL {replica.name}, started again"

    def kill_leader(self, rng: random.Random) -> str:
        return self._kill(rng, leading=True)

    def kill_follower(self, rng: random.Random) -> str:
        return self._kill(rng, leading=False)

    def pause_leader(self, rng: random.Random) -> str:
        chosen = self._replica(rng, leading=True)
        if chosen is None:
            return "no leader up"
        _, replica = chosen
        self._pause(replica.name, LEADER_PAUSE_SECONDS + rng.uniform(0, 4))
        return f"SIGSTOP {replica.name} past its Lease, then SIGCONT"

    def restart_apiserver(self, rng: random.Random) -> str:
        with cluster.apiserver_stopped(self.testbed):
            time.sleep(rng.uniform(1, 4))  # the outage itself
        return "kube-apiserver stopped and started again"

    def pause_etcd(self, rng: random.Random) -> str:
        self._pause("etcd", rng.uniform(2, 5))
        return "etcd paused"

    def slow_webhook(self, rng: random.Random) -> str:
        return self._webhooks(rng, proxy.SLOW, rng.uniform(15, 30))

    def webhook_down(self, rng: random.Random) -> str:
        return self._webhooks(rng, proxy.DOWN, rng.uniform(8, 20))

    def _webhooks(self, rng: random.Random, mode: str, seconds: float) -> str:
        controller = rng.choice(sorted(self.proxies))
        self.proxies[controller].mode = mode
        try:
            self.stopping.wait(seconds)
        finally:
            self.proxies[controller].mode = proxy.PASS
        return f"{controller}'s webhooks {mode} for {seconds:.0f}s"

    def slow_driver(self, rng: random.Random) -> str:
        seconds = rng.uniform(5, 15)
        self._pause(dra_driver.COMPONENT, seconds)
        return f"the driver answered nothing for {seconds:.0f}s"

    def _pause(self, name: str, seconds: float) -> None:
        """SIGSTOP the component's process group for `seconds`, then SIGCONT: alive, holding its connections and
        its Lease record, answering nothing."""
        pid = self.supervisor.owned_pid(name)
        if pid is None:
            return
        os.killpg(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)  # the pause itself
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)
