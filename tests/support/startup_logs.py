"""Real vLLM CPU start-up logs for the log reader (``calculator/observe/startup_log.py``): capture and keep them.

The logs under ``tests/data/vllm-startup-logs/`` were written by :func:`capture` from real servers; the test that
starts a real server (``tests/test_diagnose_real_server.py``) captures them again and requires the reader to read
the fresh log as it reads the kept one. Regenerate the kept ones with::

    .venv/bin/python tests/support/startup_logs.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.tiny_models import TinyModelFactory  # noqa: E402
from support.vllm_server import (  # noqa: E402
    VllmCpuServer,
    VllmServerError,
    cache_config_info,
    provisioned_venv,
)

LOGS_DIR = Path(__file__).resolve().parents[1] / "data" / "vllm-startup-logs"


@dataclass(frozen=True)
class LogCase:
    name: str  # the file name under LOGS_DIR, without ".log"
    version: str
    model: str  # a config in tests/data/tiny-configs/
    args: tuple[str, ...]
    # NOTE: VLLM_CPU_KVCACHE_SPACE (whole GiB) overrides --kv-cache-memory-bytes on the CPU platform; a KV space
    # smaller than one request needs the flag, so that case runs without the variable.
    kv_cache_space_gib: int | None = 1


LOG_CASES = (
    LogCase("cpu-0.32.0-llama-started", "0.32.0", "tiny-llama",
            ("--max-model-len", "1000", "--max-num-seqs", "8", "--max-num-batched-tokens", "1024")),
    LogCase("cpu-0.32.0-llama-max-len-too-long", "0.32.0", "tiny-llama",
            ("--max-model-len", "4096", "--kv-cache-memory-bytes", "1048576"), kv_cache_space_gib=None),
    LogCase("cpu-0.28.0-llama-started", "0.28.0", "tiny-llama", ("--max-model-len", "2048")),
)
CASES_BY_NAME = {case.name: case for case in LOG_CASES}


class _ServerWithoutKvSpaceVariable(VllmCpuServer):
    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.pop("VLLM_CPU_KVCACHE_SPACE", None)
        return env


def capture(case: LogCase, models: TinyModelFactory, scratch_dir: Path) -> tuple[str, dict[str, str] | None]:
    """Start a real server for ``case``: its whole log, and its ``vllm:cache_config_info`` labels (None: refused)."""
    kind = VllmCpuServer if case.kv_cache_space_gib is not None else _ServerWithoutKvSpaceVariable
    server = kind(models(case.model), venv=provisioned_venv(case.version), extra_args=case.args,
                  kv_cache_space_gib=case.kv_cache_space_gib or 1, scratch_dir=scratch_dir)
    labels = None
    try:
        with server:
            labels = cache_config_info(server.base_url)
    except VllmServerError:
        pass  # a refused start: its log holds the error
    return server.log_path.read_text(errors="replace"), labels


def main() -> None:
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="startup-logs-"))
    models = TinyModelFactory(provisioned_venv(), root / "models")
    LOGS_DIR.mkdir(parents=True, exist_ok=True)
    for case in LOG_CASES if len(sys.argv) < 2 else [CASES_BY_NAME[name] for name in sys.argv[1:]]:
        log, labels = capture(case, models, root / case.name)
        (LOGS_DIR / f"{case.name}.log").write_text(log)
        print(f"{case.name}: {'started' if labels else 'refused'}, {len(log.splitlines())} lines")


if __name__ == "__main__":
    main()
