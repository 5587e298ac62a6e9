"""Dashboard replicas on this machine, alone or behind Debian's nginx with the shipped ``deploy/nginx`` config.

Used by the load benchmark (``load.py``) and the deployment test: each replica is ``streamlit run app.py`` on its
own port (optionally pinned to CPUs), and nginx is started as an ordinary process with a private prefix, so
neither needs root nor touches the system's nginx service.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NGINX_SITE = REPO / "deploy" / "nginx" / "vllm-planner.conf"


class ReplicaError(RuntimeError):
    pass


@dataclass
class Replica:
    url: str
    port: int
    process: subprocess.Popen[bytes]

    def rss_bytes(self) -> int:
        return _status_kib(self.process.pid, "VmRSS") * 1024

    def peak_rss_bytes(self) -> int:
        return _status_kib(self.process.pid, "VmHWM") * 1024

    def cpu_s(self) -> float:
        """User + system CPU time the replica has used (/proc/PID/stat fields 14 and 15)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).status == 200:
                return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise ReplicaError(f"{url} did not become healthy:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.3)


@contextlib.contextmanager
def dashboard_replicas(count: int, logs: Path, *, cpus: Sequence[int] | None = None,
                       env: dict[str, str] | None = None) -> Iterator[list[Replica]]:
    """``count`` dashboards on free localhost ports, offline, as a shared deployment would run them."""
    logs.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
                   "VLLM_PLANNER_DEPLOYMENT": "shared", **(env or {})}
    replicas: list[Replica] = []
    try:
        for index in range(count):
            port = free_port()
            pinned = set(cpus) if cpus else None
            log = logs / f"replica{index}.log"
            with open(log, "w") as handle:
                process = subprocess.Popen(
                    [sys.executable, "-m", "pages.common.launch", "--server.port", str(port),
                     "--server.address", "127.0.0.1", "--server.headless", "true"],
                    cwd=REPO, env=environment, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
                    preexec_fn=(lambda: os.sched_setaffinity(0, pinned)) if pinned else None)
            replicas.append(Replica(url=f"http://127.0.0.1:{port}", port=port, process=process))
        for index, replica in enumerate(replicas):
            wait_healthy(replica.url, replica.process, logs / f"replica{index}.log")
        yield replicas
    finally:
        for replica in replicas:
            stop(replica.process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found is None:
        raise ReplicaError("nginx not found: `make setup-nginx` installs Debian's nginx package")
    return found


def site_config(upstream_ports: Sequence[int], listen_port: int) -> str:
    """The shipped site config with this machine's replica ports and listen port put in; nothing else changed."""
    site = NGINX_SITE.read_text()
    servers = "".join(f"    server 127.0.0.1:{port} max_fails=1 fail_timeout=10s;\n" for port in upstream_ports)
    site, replaced = re.subn(r"(upstream vllm_planner \{\n(?:    #[^\n]*\n)*    ip_hash;\n)(?:    server [^\n]*\n)+",
                             lambda m: m.group(1) + servers, site)
    if replaced != 1:
        raise ReplicaError(f"{NGINX_SITE}: no `upstream vllm_planner {{ ip_hash; server ...; }}` block to fill in")
    site, replaced = re.subn(r"listen \d+;", f"listen 127.0.0.1:{listen_port};", site)
    if replaced != 1:
        raise ReplicaError(f"{NGINX_SITE}: no single `listen PORT;` line")
    return site


@contextlib.contextmanager
def nginx_balancer(upstream_ports: Sequence[int], workdir: Path) -> Iterator[tuple[str, Path]]:
    """Debian's nginx on a free port in front of ``upstream_ports``; yields its URL and its access log, which
    records which replica served each request (``$upstream_addr``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (workdir / "vllm-planner.conf").write_text(site_config(upstream_ports, port))
    access_log = workdir / "access.log"
    # NOTE: started by root (CI), workers would switch to nobody and could not use the private temp folders.
    user = "user root;" if os.geteuid() == 0 else ""
    (workdir / "nginx.conf").write_text(f"""
{user}
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {workdir}/client_body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
    log_format replica '$remote_addr "$request" $status $upstream_addr';
    access_log {access_log} replica;
    include {workdir}/vllm-planner.conf;
}}
""")
    binary = nginx_binary()
    check = subprocess.run([binary, "-t", "-p", str(workdir), "-c", str(workdir / "nginx.conf")],
                           capture_output=True, text=True)
    if check.returncode != 0:
        raise ReplicaError(f"nginx -t refused the config:\n{check.stderr}")
    process = subprocess.Popen([binary, "-p", str(workdir), "-c", str(workdir / "nginx.conf"), "-g",
                                "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise ReplicaError(f"nginx did not start: {process.stderr.read().decode() if process.stderr else ''}")
            time.sleep(0.1)
        yield url, access_log
    finally:
        stop(process)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise ReplicaError(f"/proc/{pid}/status has no {field}")
