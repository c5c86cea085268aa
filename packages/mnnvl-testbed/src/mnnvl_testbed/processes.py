"""Background processes of the testbed: started detached, tracked by pid files, logs in the state dir."""

from __future__ import annotations

import contextlib
import os
import pathlib
import random
import shutil
import signal
import socket
import threading
import time


class ComponentError(RuntimeError):
    """A component failed to start or become ready; the message names it and shows the tail of its log."""


#: The kernel's range for the local ports of outgoing connections (Linux' default when it cannot be read).
EPHEMERAL_RANGE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_handing_out = threading.Lock()


def listening_ports(ephemeral: tuple[int, int]) -> range:
    """Where `free_port` picks: below the ephemeral range (above it when there is no room below)."""
    low, high = ephemeral
    if low - 1024 >= 4096:
        return range(max(1024, low - 12288), low)
    return range(high + 1, 65536)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A port nothing listens on now, for a component to bind soon after.

    Picked outside the kernel's ephemeral range: a port the kernel hands out (as `bind(0)` would) can be taken
    by any outgoing connection before the component binds it. Never the same port twice from one process."""
    candidates = listening_ports(_ephemeral_range())
    with _handing_out:
        for _ in range(1000):
            port = random.choice(candidates)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise ComponentError(f"no free port in {candidates.start}-{candidates.stop - 1}")


def log_tail(log: pathlib.Path, lines: int = 25) -> str:
    if not log.exists():
        return "(no log written)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


class Supervisor:
    """Starts components as their own sessions so they outlive the `up` command; stops them by pid."""

    def __init__(self, state_dir: pathlib.Path) -> None:
        self.logs = state_dir / "logs"
        self.pids = state_dir / "pids"

    def start(
        self, name: str, command: list[str], *, env: dict[str, str] | None = None, program: str | None = None
    ) -> int:
        """Start `command` as component `name`. `program`: what the process runs in the end when the command sets
        something up and then execs it: either is accepted when a pid is checked before a signal."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pids.mkdir(parents=True, exist_ok=True)
        executable = shutil.which(command[0]) or command[0]
        with self.log(name).open("ab") as log:
            # posix_spawn with setsid: the component leads its own session and outlives this process,
            # and no Popen object is left behind to complain about a child it never waited for.
            pid = os.posix_spawn(
                executable,
                command,
                {**os.environ, **(env or {})},
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, log.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, log.fileno(), 2),
                ],
                setsid=True,
            )
        # Written aside and renamed into place: a reader (the chaos run's webhook stand-in asks which replicas are up
        # while one is started again) must never see the file empty.
        written = self.pids / f".{name}.pid.{pid}"
        written.write_text("\n".join([f"{pid} {command[0]}", *([program] if program else [])]))
        os.replace(written, self.pids / f"{name}.pid")
        return pid

    def log(self, name: str) -> pathlib.Path:
        return self.logs / f"{name}.log"

    def pid(self, name: str) -> int | None:
        path = self.pids / f"{name}.pid"
        return int(path.read_text().split(" ", 1)[0]) if path.exists() else None

    def environment(self, name: str) -> dict[str, str]:
        """The environment component `name` runs with, read from its process: what it got, whoever started it and
        whatever the caller's environment held."""
        self.ensure_alive(name)
        entries = pathlib.Path(f"/proc/{self.pid(name)}/environ").read_bytes().decode(errors="replace").split("\0")
        return {key: value for key, _, value in (entry.partition("=") for entry in entries if entry)}

    def program(self, name: str) -> str | None:
        """What component `name` was started with (its command's first argument); None if it was not started."""
        path = self.pids / f"{name}.pid"
        return path.read_text().splitlines()[0].partition(" ")[2] if path.exists() else None

    def owned_pid(self, name: str) -> int | None:
        """The pid, only if that process still runs what we started: pids are reused after a reboot or a kill,
        and signalling a stranger's process group must never happen."""
        path = self.pids / f"{name}.pid"
        if not path.exists():
            return None
        pid_text, _, programs = path.read_text().partition(" ")
        try:
            cmdline = pathlib.Path(f"/proc/{pid_text}/cmdline").read_bytes()
        except OSError:
            return None
        # Empty for a zombie: ours (reaping it is harmless); anything else must match what we started.
        return int(pid_text) if not cmdline or cmdline.split(b"\0", 1)[0].decode() in programs.splitlines() else None

    def alive(self, name: str) -> bool:
        pid = self.pid(name)
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # A zombie (exited, not yet reaped) is not alive.
        with contextlib.suppress(OSError):
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
            return state != "Z"
        return True

    def names(self) -> list[str]:
        return sorted(path.stem for path in self.pids.glob("*.pid")) if self.pids.exists() else []

    def stop(self, name: str, *, timeout: float = 15.0) -> None:
        pid = self.owned_pid(name)
        if pid is not None:
            _terminate(pid, timeout)
        (self.pids / f"{name}.pid").unlink(missing_ok=True)

    def kill(self, name: str, *, timeout: float = 15.0) -> int | None:
        """Kill the component at once, as a crash would: SIGKILL to its process group, so no shutdown code runs
        (a Lease is not released, nothing is flushed). Reaps it when it is our child; the pid file stays, and
        `alive` reports it dead. Returns the pid killed (None: nothing of ours was running)."""
        pid = self.owned_pid(name)
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while self.alive(name) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return pid

    def fail(self, name: str, what: str) -> ComponentError:
        return ComponentError(f"{name}: {what}\n--- last lines of {self.log(name)} ---\n{log_tail(self.log(name))}")

    def ensure_alive(self, name: str) -> None:
        if not self.alive(name):
            raise self.fail(name, "exited during start-up")


def _terminate(pid: int, timeout: float) -> None:
    # The component leads its own process group; signal the group so helpers it spawned go too.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            time.sleep(0.1)
