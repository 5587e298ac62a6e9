"""Start and stop a real Prometheus (Debian's ``prometheus`` package) scraping given targets, for tests.

    with PrometheusServer({"team-a": ["127.0.0.1:8001"], "team-b": ["127.0.0.1:8002"]}) as prometheus:
        prometheus.wait_for_targets(2)
        ... prometheus.base_url ...

Each key is a ``namespace`` label put on its targets (as Kubernetes relabelling would), so tests can group by it.
The server listens on 127.0.0.1 only, keeps its TSDB in a temp folder, scrapes every second and is stopped by PID
(SIGTERM, then SIGKILL). ``make setup-prometheus`` installs the package.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from support.vllm_server import free_port, log_tail

SCRAPE_INTERVAL_S = 1
STARTUP_TIMEOUT_S = 60.0  # measured 1-3 s
STOP_GRACE_S = 10.0
JOB = "vllm"


class PrometheusServerError(RuntimeError):
    """Prometheus is missing, did not start, or did not scrape its targets."""


def prometheus_binary() -> str:
    """The ``prometheus`` executable; fails loudly (never skips) when the package is not installed."""
    found = shutil.which("prometheus")
    if found is None:
        raise PrometheusServerError("the prometheus binary is not on PATH: run `make setup-prometheus` (Debian's "
                                    "prometheus package); the fleet tests cannot run without it")
    return found


def scrape_config(targets_by_namespace: dict[str, list[str]], interval_s: int = SCRAPE_INTERVAL_S) -> str:
    """prometheus.yml scraping ``/metrics`` of every target; JSON is valid YAML, so no YAML library is needed."""
    return json.dumps({
        "global": {"scrape_interval": f"{interval_s}s", "scrape_timeout": f"{interval_s}s",
                   "evaluation_interval": f"{interval_s}s"},
        "scrape_configs": [{
            "job_name": JOB, "metrics_path": "/metrics",
            "static_configs": [{"targets": targets, "labels": {"namespace": namespace}}
                               for namespace, targets in targets_by_namespace.items()],
        }],
    }, indent=2)


class PrometheusServer:
    def __init__(self, targets_by_namespace: dict[str, list[str]], *, port: int | None = None,
                 scratch_dir: str | Path | None = None) -> None:
        self.targets_by_namespace = targets_by_namespace
        self.port = port if port is not None else free_port()
        self.scratch_dir = Path(scratch_dir or tempfile.mkdtemp(prefix="prometheus-"))
        self.config_path = self.scratch_dir / "prometheus.yml"
        self.log_path = self.scratch_dir / "prometheus.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [prometheus_binary(), f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.scratch_dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn"]

    def start(self) -> PrometheusServer:
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(scrape_config(self.targets_by_namespace))
        command = self.command()
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._fail(f"exited with code {self._process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        self._fail(f"was not ready within {STARTUP_TIMEOUT_S:.0f} s")
        raise AssertionError("unreachable")

    def api(self, path: str) -> object:
        """``data`` of a GET on the HTTP API (``path`` with its query string)."""
        with urllib.request.urlopen(f"{self.base_url}{path}", timeout=10) as response:
            payload = json.loads(response.read())
        if payload.get("status") != "success":
            raise PrometheusServerError(f"{path}: {payload}")
        return payload["data"]

    def wait_for_targets(self, count: int, timeout_s: float = 60.0) -> None:
        """Until ``count`` targets are up (scraped successfully at least once)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            targets = self.api("/api/v1/targets?state=active")["activeTargets"]  # type: ignore[index]
            if sum(1 for t in targets if t.get("health") == "up") >= count:
                return
            time.sleep(0.5)
        self._fail(f"did not see {count} healthy targets within {timeout_s:.0f} s: {targets}")

    def _fail(self, what: str) -> None:
        self.stop()
        raise PrometheusServerError(f"prometheus (port {self.port}) {what}.\n$ {' '.join(self.command())}\n"
                                    f"log {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; idempotent. The TSDB folder is removed."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        shutil.rmtree(self.scratch_dir / "data", ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
