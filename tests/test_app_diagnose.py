"""The Diagnose page under AppTest: a pasted log gives the header, the explanation, the fixes and the calibrated
Plan link; what the log does not say is asked for; a bad paste is one sentence, never a traceback."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "pages" / "diagnose.py")
LOGS = ROOT / "tests" / "data" / "vllm-startup-logs"
OOM = (LOGS / "records" / "llmd-h100-llama33-70b-fp8-tp1-failed.log").read_text()


def _table(app: AppTest, first_column: str):
    return next(df.value for df in app.dataframe if df.value.columns[0] == first_column)


def _page(text: str, gpu: str | None = None, version: str | None = None) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=120)
    app.run()
    app.text_area(key="diagnose_log").input(text)
    if gpu:
        app.selectbox(key="diagnose_gpu").select(gpu)
    if version:
        app.text_input(key="diagnose_version").input(version)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def test_a_failed_start_is_explained_with_fixes_and_a_calibrated_link():
    app = _page(OOM, gpu="H100 SXM 80GB", version="0.11.0")
    error = app.error[0].value
    assert error.startswith("**It failed:** Weights, activation peak and non-torch memory take all of")
    assert "`ValueError: No available memory for the cache blocks.`" in error
    rows = _table(app, "figure")
    weights = rows[rows["figure"] == "Weights"].iloc[0]
    assert weights["vLLM printed"] == 67.72  # "Model loading took: 67.72 GiB memory"
    kv = rows[rows["figure"] == "KV cache memory"].iloc[0]
    assert kv["vLLM printed"] == -1.44  # "Available KV cache memory: -1.44 GiB"
    fixes = _table(app, "change")
    assert len(fixes) >= 1 and (fixes["KV cache tokens"] > 0).all()
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["max_model_len"] == "16,000" and metrics["block size"] == "128"
    link = next(b for b in app.get("link_button") if "calibrated to this machine" in b.proto.label)
    query = parse_qs(urlsplit(link.proto.url).query)
    assert query["len"] == ["16000"] and query["v"] == ["0.11.0"] and float(query["adj"][0]) != 0


def test_the_gpu_is_asked_for():
    app = _page(OOM, version="0.11.0")
    assert app.error[0].value.startswith("The log does not say which GPU ran it: give the GPU")


def test_a_cpu_log_needs_no_gpu_and_shows_the_stacks():
    text = (LOGS / "cpu-0.32.0-llama-started.log").read_text()
    app = AppTest.from_file(PAGE, default_timeout=120)
    app.run()
    app.text_area(key="diagnose_log").input(text)
    app.text_input(key="diagnose_model").input(str(ROOT / "tests" / "data" / "tiny-configs" /
                                                   "tiny-llama.config.json"))
    app.run()
    assert not app.exception
    assert app.success[0].value.startswith("**It started.**")
    rows = _table(app, "figure")
    tokens = rows[rows["figure"] == "KV cache tokens"].iloc[0]
    assert tokens["vLLM printed"] == 1_024_000 == tokens["estimate"]


def test_a_bad_paste_is_one_sentence():
    app = _page('127.0.0.1 - - [04/Dec/2026:05:00:00 +0000] "GET / HTTP/1.1" 200 612\n' * 50)
    assert app.error[0].value.startswith("No vLLM start-up lines in these 50 lines")


def test_a_bench_result_gets_the_measured_efficiencies_link():
    block = (ROOT / "tests" / "data" / "vllm-bench" / "qwen3-1536-a100-80g-qwen3-14b-awq-c1-16k.txt").read_text()
    app = _page(block, gpu="A100 SXM 80GB")
    rows = _table(app, "figure")
    assert rows[rows["figure"] == "mean_tpot_ms"].iloc[0]["measured"] == 20.63  # "Mean TPOT (ms): 20.63"
    link = next(b for b in app.get("link_button") if "measured efficiencies" in b.proto.label)
    query = parse_qs(urlsplit(link.proto.url).query)
    assert query["m"] == ["Qwen/Qwen3-14B-AWQ"] and 0 < float(query["mbu"][0]) <= 1.2 and "mfu" in query


def test_a_paste_too_large_is_refused_with_its_size():
    app = _page("INFO GPU KV cache size: 1 tokens\n" * 200_000)  # 6.6 MB
    assert app.error[0].value.startswith("The paste is 6.6 MB; a start-up log is read up to 5 MB")
