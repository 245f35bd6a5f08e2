"""A Ray cluster of several hosts on one machine: each host a Linux network namespace.

Layout (addresses in the private test subnet 10.213.0.0/24, which only exists inside the
namespaces made here; nothing is routed anywhere else):

* ``jr-sw``: a namespace holding only the bridge ``br-judge`` (the "switch"); each host's
  veth pair has one end on that bridge and the other, ``eth0``, in the host's namespace;
* ``jr-h1`` 10.213.0.1: the Ray head (``--num-cpus 0``: it judges nothing) and the client;
* ``jr-h2`` 10.213.0.2, ``jr-h3`` 10.213.0.3: a Ray worker each (``--num-cpus 1``);
* ``jr-h4`` 10.213.0.4: the simulated OpenAI-compatible LLM (``scripts/sim_llm_server.py``).

Every process is started with ``ip netns exec NS setsid ...``: its own process group, which
:meth:`NetnsCluster.kill_host` and :meth:`NetnsCluster.close` kill by pid (``kill -9`` of the
group: the raylet, its workers and everything they started). ``ray stop`` is never used (it
kills every Ray process of the machine, other tests' included). Namespaces, links and the
Ray temp directory are removed at the end, and leftovers of a crashed earlier run at the
start. The commands are the ones ``docs/guides/cluster.md`` shows (:data:`HEAD_COMMAND`,
:data:`WORKER_COMMAND`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IP = shutil.which("ip") or "/usr/sbin/ip"
ROOT = Path(__file__).resolve().parents[1]
SUBNET = "10.213.0"
SWITCH = "jr-sw"
BRIDGE = "br-judge"
HOSTS = {1: "jr-h1", 2: "jr-h2", 3: "jr-h3", 4: "jr-h4"}
GCS_PORT = 6380
SIM_PORT = 8000
RAY_TEMP = "/tmp/jr-ray"  # short: Ray's unix socket paths must stay under 108 bytes
BIN = Path(sys.executable).parent

# The same ports on every host (each host has its own network namespace): what a firewall
# between the hosts must let through (docs/guides/cluster.md, "Ports").
PORTS = [
    "--node-manager-port", "10210",
    "--object-manager-port", "10211",
    "--runtime-env-agent-port", "10212",
    "--dashboard-agent-grpc-port", "10213",
    "--dashboard-agent-listen-port", "10214",
    "--metrics-export-port", "10215",
    "--min-worker-port", "10300",
    "--max-worker-port", "10399",
]  # fmt: skip
HEAD_COMMAND = [
    "ray", "start", "--head", "--block",
    "--node-ip-address", f"{SUBNET}.1", "--port", str(GCS_PORT),
    "--ray-client-server-port", "10201", "--num-cpus", "0",
    "--include-dashboard=false", "--disable-usage-stats",
    "--object-store-memory", "80000000", "--temp-dir", RAY_TEMP, *PORTS,
]  # fmt: skip


def worker_command(host: int) -> list[str]:
    return [
        "ray", "start", "--block", "--address", f"{SUBNET}.1:{GCS_PORT}",
        "--node-ip-address", f"{SUBNET}.{host}", "--num-cpus", "1",
        "--disable-usage-stats", "--object-store-memory", "80000000", *PORTS,
    ]  # fmt: skip


def _run(args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=60)


def can_make_namespaces() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not os.path.exists(IP):
        return "no `ip` (iproute2) on this machine"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "the Ray engine needs ray: pip install 'judge[ray]'"
    probe = "jr-probe"
    made = _run([IP, "netns", "add", probe], check=False)
    _run([IP, "netns", "del", probe], check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    return None


def clean_leftovers() -> None:
    """Remove what a crashed earlier run left: its processes (by the namespace they run
    in), its namespaces (their links go with them) and the Ray temp directory."""
    for ns in [*HOSTS.values(), SWITCH]:
        pids = _run([IP, "netns", "pids", ns], check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _run([IP, "netns", "del", ns], check=False)
    shutil.rmtree(RAY_TEMP, ignore_errors=True)


@dataclass
class NetnsCluster:
    """The hosts, the processes started in them and a way to stop them all."""

    workdir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def head(self) -> str:
        return f"{SUBNET}.1:{GCS_PORT}"

    @property
    def sim_url(self) -> str:
        return f"http://{SUBNET}.4:{SIM_PORT}"

    # -- the network ----------------------------------------------------------------------------

    def make_network(self) -> None:
        clean_leftovers()
        # Ray reads ~/.ray (an auth token file there, left by any other Ray on the machine,
        # makes the head refuse our workers): every process here gets a home of its own.
        home = self.workdir / "home"
        home.mkdir(parents=True, exist_ok=True)
        self.env = {**self.env, "HOME": str(home)}
        _run([IP, "netns", "add", SWITCH])
        _run([IP, "-n", SWITCH, "link", "set", "lo", "up"])
        _run([IP, "-n", SWITCH, "link", "add", BRIDGE, "type", "bridge"])
        _run([IP, "-n", SWITCH, "link", "set", BRIDGE, "up"])
        for n, ns in HOSTS.items():
            _run([IP, "netns", "add", ns])
            _run([IP, "-n", ns, "link", "set", "lo", "up"])
            # Made inside the host: eth0 stays there, its peer moves to the switch.
            _run(
                [
                    IP,
                    "-n",
                    ns,
                    "link",
                    "add",
                    "eth0",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    f"p{n}",
                    "netns",
                    SWITCH,
                ]
            )
            _run([IP, "-n", SWITCH, "link", "set", f"p{n}", "master", BRIDGE, "up"])
            _run([IP, "-n", ns, "addr", "add", f"{SUBNET}.{n}/24", "dev", "eth0"])
            _run([IP, "-n", ns, "link", "set", "eth0", "up"])

    def link(self, host: int, up: bool) -> None:
        _run([IP, "-n", HOSTS[host], "link", "set", "eth0", "up" if up else "down"])

    # -- processes ------------------------------------------------------------------------------

    def start(self, name: str, host: int, argv: Sequence[str], env: dict[str, str] | None = None) -> Any:
        """Start ``argv`` in ``host``'s namespace, in a process group of its own."""
        (self.workdir / f"{name}.log").unlink(missing_ok=True)
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115
        cmd = [IP, "netns", "exec", HOSTS[host], *argv]
        proc = subprocess.Popen(
            cmd, env=env or self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.procs[name] = proc
        return proc

    def netns_run(self, host: int, argv: Sequence[str], timeout: float, **kw: Any) -> Any:
        """Run ``argv`` in ``host``'s namespace to its end (at most ``timeout`` s)."""
        return subprocess.run(
            [IP, "netns", "exec", HOSTS[host], *argv],
            env=kw.pop("env", self.env),
            cwd=ROOT,
            timeout=timeout,
            **kw,
        )

    def kill(self, name: str) -> None:
        """``kill -9`` the process group of ``name`` (everything it started)."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def kill_host(self, host: int) -> None:
        """Every process running in ``host``'s namespace, ``kill -9`` (a host lost)."""
        for name in [n for n in self.procs if n.endswith(f"@{host}")]:
            self.kill(name)
        for pid in _run([IP, "netns", "pids", HOSTS[host]], check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)

    def start_sim(self, **settings: Any) -> None:
        argv = [
            str(BIN / "python"),
            "scripts/sim_llm_server.py",
            "--host",
            f"{SUBNET}.4",
            "--port",
            str(SIM_PORT),
        ]
        argv += ["--log", str(self.workdir / "requests.jsonl")]
        for k, v in settings.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        self.start("sim@4", 4, argv)
        self.wait_for(lambda: self.sim_get("/stats") is not None, 60, "the simulated LLM did not start")

    def start_ray(self, hosts: Sequence[int] = (1, 2, 3)) -> None:
        """Start the head (host 1) and the workers, one after the other (two nodes joining
        at once in one Ray temp directory can time out), each awaited until it says so."""
        for n in hosts:
            argv = HEAD_COMMAND if n == 1 else worker_command(n)
            for attempt in (1, 2, 3):
                self.start(f"ray@{n}", n, [str(BIN / argv[0]), *argv[1:]])
                try:
                    self.wait_for(lambda n=n: self.ray_started(n), 240, f"Ray on host {n} did not start")
                    break
                except AssertionError:
                    # A node joining a head that has only just started is sometimes refused
                    # (seen: "InvalidAuthToken" with auth disabled); it joins when asked again.
                    self.kill_host(n)
                    if attempt == 3 or n == 1:
                        raise
                    time.sleep(2)

    def restart_ray(self) -> None:
        """A new cluster on hosts 1-3 (after the head was lost): every process left there
        killed, the old session's temp directory removed, then :meth:`start_ray`."""
        for host in (1, 2, 3):
            self.kill_host(host)
        shutil.rmtree(RAY_TEMP, ignore_errors=True)
        self.start_ray()

    def ray_started(self, host: int) -> bool:
        proc = self.procs[f"ray@{host}"]
        text = (self.workdir / f"ray@{host}.log").read_text(errors="replace")
        if proc.poll() is not None:
            raise AssertionError(f"`ray start` on host {host} ended (rc={proc.returncode}):\n{text[-3000:]}")
        return "Ray runtime started." in text

    def sim_get(self, path: str, payload: dict[str, Any] | None = None) -> Any:
        """GET (or POST ``payload``) the simulated LLM from inside the client's host."""
        data = json.dumps(payload) if payload is not None else ""
        code = (
            "import sys,urllib.request as u;d=sys.argv[2].encode() or None;"
            "r=u.Request(sys.argv[1],data=d,method='POST' if d else 'GET');"
            "r.add_header('Content-Type','application/json');print(u.urlopen(r,timeout=10).read().decode())"
        )
        try:
            done = self.netns_run(
                1,
                [str(BIN / "python"), "-c", code, self.sim_url + path, data],
                30,
                capture_output=True,
                text=True,
            )
        except subprocess.TimeoutExpired:
            return None
        if done.returncode != 0:
            return None
        return json.loads(done.stdout)

    def requests_logged(self) -> int:
        log = self.workdir / "requests.jsonl"
        if not log.exists():
            return 0
        with open(log, "rb") as fh:
            return fh.read().count(b"\n")

    @staticmethod
    def wait_for(ready: Any, timeout: float, message: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"{message} within {timeout:g} s")
            time.sleep(0.2)

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)
        clean_leftovers()
