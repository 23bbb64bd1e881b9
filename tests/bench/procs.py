"""Benchmark step 2: the processes under test, started on loopback, read through /proc."""

from __future__ import annotations

import http.client
import os
import platform
import resource
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def descendants(pid: int) -> list[int]:
    """The pid and all its live descendants (uvicorn's worker processes, for instance)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, ()))
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (fields 14 and 15 of /proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def busy_seconds() -> float:
    """CPU time all processes spent (user, nice, system; all cores), from /proc/stat.

    Interrupt and softirq time are left out: loopback networking is charged there, and
    it is the benchmark's own traffic, not another process competing for the cores."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2]) / TICKS


def children_cpu() -> float:
    """CPU used by this process's waited-for children so far (wrk runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def get(port: int, path: str, timeout: float = 1.0) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def post(
    port: int, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        hdrs = {"content-type": "application/json", **(headers or {})}
        conn.request("POST", path, body=body, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@dataclass
class Server:
    """One server process; `startup_s` is the time from spawn to a 200 on its health path."""

    name: str
    cmd: list[str]
    port: int
    health: str
    env: dict[str, str] = field(default_factory=dict)
    log: Path | None = None
    cwd: Path | None = None  # None: this process's working directory
    proc: subprocess.Popen[bytes] | None = None
    startup_s: float = 0.0
    _log_file: IO[bytes] | None = None

    def start(self, timeout_s: float = 90.0) -> Server:
        self._log_file = open(self.log, "wb") if self.log else None  # noqa: SIM115
        out: Any = self._log_file or subprocess.DEVNULL
        began = time.perf_counter()
        self.proc = subprocess.Popen(
            self.cmd,
            env={**os.environ, **self.env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.cwd,
        )
        while time.perf_counter() - began < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}; see {self.log}"
                )
            try:
                if get(self.port, self.health, timeout=0.5) == 200:
                    self.startup_s = time.perf_counter() - began
                    return self
            except OSError:
                pass
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"{self.name} not healthy after {timeout_s} s; see {self.log}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu(self) -> float:
        return sum(cpu_seconds(p) for p in descendants(self.pid))

    def rss(self) -> dict[str, float]:
        return {str(p): round(rss_mb(p), 1) for p in descendants(self.pid)}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: workers too
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self._log_file:
            self._log_file.close()


def machine() -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_at_start": os.getloadavg()[0],
    }


NO_DOC = "CONTEXT_PROXY_BENCH_NO_DOC"


def write_doc_section(
    doc: Path, marks: tuple[str, str], heading: str, command: str, body: str
) -> None:
    """Put `body` between the `marks` in `doc` (under `heading` at the end when they are not
    there yet), headed by the command, the commit, the date and the machine; nothing when
    NO_DOC is set in the environment (run_all.py --quick: short runs are not recorded)."""
    if os.environ.get(NO_DOC):
        return
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=doc.parents[1], capture_output=True, text=True
    ).stdout.strip()
    m = machine()
    when = time.strftime("%Y-%m-%d", time.gmtime())
    begin, end = marks
    stamp = f"`{command}` — commit {commit}, {when}, {m['nproc']} cores ({m['cpu']}), Python {m['python']}."
    section = "\n".join([begin, stamp, "", body, end])
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + f"\n\n## {heading}\n\n" + section + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
