"""Diagnose: paste a vLLM start-up log, an error or a `vllm bench serve` result; see it explained and reproduced."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError, Scenario
from calculator.gpus import gpu_catalog
from calculator.observe.bench_result import BENCH_MARKERS, BenchDiagnosis, diagnose_bench
from calculator.observe.diagnose import Diagnosis, diagnose_text
from calculator.observe.diagnose_chart import printed_vs_predicted_figure
from calculator.observe.startup_log import MAX_LOG_BYTES
from pages.common import page_setup, sentence
from pages.common.state import carried_context, plan_link

NOT_SAID = "— (the log does not say)"
CHART_CONFIG = {"displaylogo": False}


@st.cache_data(max_entries=16, show_spinner=False)
def _diagnosed(text: str, gpu: str | None, model: str | None, version: str | None,
               planned: Scenario | None = None) -> Diagnosis | BenchDiagnosis | str:
    """The log (or benchmark result) explained, or the sentence saying why it cannot be; ``planned``: the
    deployment the user was just looking at, whose model and version stand in where the log is silent."""
    try:
        if any(marker in text for marker in BENCH_MARKERS):
            return diagnose_bench(text, gpu=gpu, model=model, vllm_version=version)
        return diagnose_text(text, gpu=gpu, model=model, vllm_version=version, planned=planned)
    except CalculatorError as exc:
        return sentence(exc)


def pasted() -> str | None:
    """The pasted text, or the uploaded file's (read up to the reader's cap; a larger one is refused)."""
    upload = st.file_uploader("…or upload the log file", type=None, key="diagnose_upload")
    if upload is not None:
        data = upload.getvalue()
        if len(data) > MAX_LOG_BYTES:
            st.error(f"The file is {len(data) / 1e6:,.1f} MB; a start-up log is read up to {MAX_LOG_BYTES / 1e6:,.0f} "
                     "MB: keep the lines from the launch to the first request (or to the error).")
            return None
        if b"\x00" in data[:65536]:
            st.error("This is a binary file, not a vLLM log: upload the server's text output.")
            return None
        return data.decode("utf-8", errors="replace")
    return st.session_state.get("diagnose_log") or None


def deployment_header(found: Diagnosis) -> None:
    log, s = found.log, found.result.settings
    st.markdown(f"**vLLM {found.scenario.vllm_version}** ({found.result.rules.engine.upper()} engine) · "
                f"`{found.scenario.model}` · "
                f"{found.result.gpu.name if found.result.gpu else 'CPU'}")
    cells = [*st.columns(4), *st.columns(4)]
    for cell, (label, value) in zip(cells, (
            ("TP × PP × DP", f"{s.tensor_parallel_size} × {s.pipeline_parallel_size} × "
                             f"{found.scenario.data_parallel_size}"),
            ("max_model_len", f"{s.max_model_len:,}"), ("gpu_memory_utilization", f"{s.gpu_memory_utilization:g}"),
            ("block size", f"{s.block_size}"), ("dtype", s.dtype), ("KV cache dtype", s.kv_cache_dtype),
            ("max_num_seqs", f"{s.max_num_seqs:,}"), ("max_num_batched_tokens", f"{s.max_num_batched_tokens:,}"))):
        cell.metric(label, value)
    read = ", ".join(f"{key} ({where})" for key, where in log.sources.items())
    st.caption(f"Read from the log: {read or 'nothing'}. Everything else is vLLM's default for this version, as the "
               "estimate resolves it.")


def explanation(found: Diagnosis) -> None:
    outcome = found.log.outcome
    if outcome.status == "failed":
        st.error(f"**It failed:** {found.cause}\n\nRaised by {outcome.check}: `{outcome.error}`", icon="🛑")
    elif outcome.status == "started":
        st.success("**It started.** The figures below are what it printed and what the estimate predicts.", icon="✅")
    else:
        st.info("The log stops before the server started or failed; the figures it printed are compared below.")
    if found.largest:
        st.markdown(f"**What differs most:** {found.largest}")
    left, right = st.columns([3, 2])
    left.plotly_chart(printed_vs_predicted_figure(found), config=CHART_CONFIG, key="diagnose_stacks")
    unprinted = [row.label for row in found.rows if row.printed is None and row.key.endswith("_gib")]
    if unprinted:
        left.caption(f"Not printed by this log, so missing from its bar: {', '.join(unprinted)}.")
    right.dataframe([{"figure": row.label, "vLLM printed": row.printed, "estimate": round(row.predicted, 4),
                      "difference": None if row.difference is None else round(row.difference, 4)}
                     for row in found.rows], hide_index=True, key="diagnose_rows")


def fixes_and_calibration(found: Diagnosis) -> None:
    if found.fixes:
        st.markdown("#### Changes that make it start")
        st.dataframe([{"change": fix.description, "KV cache tokens": fix.kv_cache_tokens,
                       "max concurrency": round(fix.max_concurrency, 2)} for fix in found.fixes],
                     hide_index=True, key="diagnose_fixes")
    if found.calibrated is not None:
        st.link_button(f"Open the Plan page calibrated to this machine ({found.calibration_gib:+.3f} GiB overhead)",
                       plan_link(found.calibrated), icon="🧮")
        st.caption(f"Calibration: {found.calibration_note}. Other lengths, TP and versions then start from the "
                   "user's own machine.")
    else:
        st.caption(f"No calibration: {found.calibration_note}.")
    for note in found.notes:
        st.caption(note)


def bench_view(found: BenchDiagnosis) -> None:
    st.markdown(f"**Benchmark** · `{found.scenario.model}` on {found.scenario.gpu} · "
                f"{found.traffic.input_tokens:,} in / {found.traffic.output_tokens:,} out tokens per request")
    st.dataframe([{"figure": name, "measured": measured, "predicted": round(predicted, 2)}
                  for name, measured, predicted in found.rows], hide_index=True, key="bench_rows")
    measured = found.measured
    st.link_button(f"Open the Plan page with the measured efficiencies (mbu {measured.bandwidth_efficiency:.3f}, "
                   f"mfu {measured.compute_efficiency:.3f})", plan_link(found.scenario, speed=measured), icon="🧮")
    st.caption(f"Fitted: mbu {found.fitted[0]:.3f}, mfu {found.fitted[1]:.3f}. " + " ".join(found.notes))


page_setup("Diagnose")
st.caption("Paste what vLLM printed at start-up (or its error, or a `vllm bench serve` result with the command) "
           "to see why it did that: every figure it printed next to the estimate, the cause of a failure, the "
           "changes that make it start, and a plan calibrated to the machine it ran on.")
# NOTE: no max_chars: the browser would cut a longer paste silently; the reader refuses it with a sentence instead.
st.text_area("vLLM log", key="diagnose_log", height=220,
             placeholder="INFO ... Model loading took 14.99 GiB ...\nINFO ... Available KV cache memory: ...")
text = pasted()
carried = carried_context()  # NOTE: the plan the user was just looking at: the one to reproduce the log against
planned = carried[0] if carried else None
with st.sidebar:
    st.subheader("What the log does not say")
    gpus = {NOT_SAID: None, **{g.name: g.key for g in gpu_catalog()}}
    if planned is not None and planned.gpu and "diagnose_gpu" not in st.session_state:
        st.session_state["diagnose_gpu"] = next((name for name, key in gpus.items() if key == planned.gpu), NOT_SAID)
    gpu = gpus[st.selectbox("GPU it ran on", list(gpus), key="diagnose_gpu",
                            help="vLLM never prints the GPU's name; its memory comes from the log when printed.")]
    model = st.text_input("Model (when the log's path cannot be read here)", key="diagnose_model").strip() or None
    version = st.text_input("vLLM version (when the log does not print it)", key="diagnose_version").strip() or None
    if planned is not None:
        st.caption(f"Your plan (`{planned.model}`, vLLM {planned.vllm_version}) fills what the log and these "
                   "fields leave out: the GPU above, then the model and version.")

found = _diagnosed(text, gpu, model, version, planned) if text else None
if found is None:
    st.info("Paste a log above to begin.", icon="📋")
elif isinstance(found, str):
    st.error(found)
elif isinstance(found, BenchDiagnosis):
    bench_view(found)
else:
    deployment_header(found)
    explanation(found)
    fixes_and_calibration(found)
