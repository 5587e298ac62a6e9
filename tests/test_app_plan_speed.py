"""The Plan page's Speed section through AppTest: KPIs worked out by hand from the roofline, both ceilings in the
capacity plan, the chart's marks, the share link, and a CPU deployment that gets no speed prediction."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.apptest import metrics, run_with_link
from test_speed_roofline import (
    H100_CEILING,
    H100_STREAMING_BYTES_S,
    LLAMA8_ACTIVATION_BYTES_PER_TOKEN,
    LLAMA8_ATTENTION_FLOPS_PER_CONTEXT_TOKEN,
    LLAMA8_KV_BYTES_PER_TOKEN,
    LLAMA8_LINEAR_PARAMS,
    LLAMA8_NORM_BYTES,
)

from calculator.units import format_ms

APP = str(Path(__file__).resolve().parents[1] / "app.py")
# The fitted CUDA constants (calculator/speed/calibration.py), restated: the test recomputes from them by hand.
BANDWIDTH_EFFICIENCY, COMPUTE_EFFICIENCY, OVERLAP = 1.069, 0.619, 0.5
# one user's decode-only steps replay one full CUDA graph (vLLM 0.11+): the full graph's gap per kernel
STEP_S, SEQUENCE_S, FULL_GRAPH_KERNEL_S = 1.18e-3, 56.5e-6, 3.54e-6
LLAMA8_KERNELS_PER_STEP = 32 * (6 + 4)  # per layer: attention block 6 kernels, dense MLP 4 (calculator/speed/costs.py)


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()
    st.cache_resource.clear()


run_app = partial(run_with_link, APP)


def text_of(app: AppTest) -> str:
    return " ".join(e.value for kind in ("markdown", "warning", "error", "info", "caption")
                    for e in getattr(app, kind))


def hand_tpot_s(prompt: int, output: int, bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY) -> float:
    """One user, Llama-3.1-8B on one H100: the steady decode step of the scheduler's closed loop.

    With one running request and a 1,000-token prompt in one 8,192-token chunk (k = 1), an average step decodes
    (O - 1) / (1 + O - 1) of a request at context P + O/2; nobody else's prompt rides along.
    """
    decode = (output - 1) / output
    context = prompt + output / 2
    streamed = (2 * LLAMA8_LINEAR_PARAMS + LLAMA8_NORM_BYTES + decode * context * LLAMA8_KV_BYTES_PER_TOKEN
                + decode * LLAMA8_ACTIVATION_BYTES_PER_TOKEN)
    flops = decode * 2 * LLAMA8_LINEAR_PARAMS + decode * context * LLAMA8_ATTENTION_FLOPS_PER_CONTEXT_TOKEN
    memory_s = streamed / (H100_STREAMING_BYTES_S * bandwidth_efficiency)
    compute_s = flops / (H100_CEILING * COMPUTE_EFFICIENCY)
    gpu_s = max(memory_s, compute_s) + OVERLAP * min(memory_s, compute_s) + FULL_GRAPH_KERNEL_S * LLAMA8_KERNELS_PER_STEP
    cpu_s = STEP_S + SEQUENCE_S * 1  # one running request
    return max(gpu_s, cpu_s)  # async scheduling (the default from 0.14): the CPU prepares the next step meanwhile


def test_tokens_per_user_is_one_over_the_hand_computed_decode_step() -> None:
    app = run_app({"in": "1000", "out": "1001", "price": "2"})
    tpot_s = hand_tpot_s(1000, 1001)  # about 6.0 ms
    shown = metrics(app)
    assert shown["Tokens/s per user"] == f"{1 / tpot_s:,.1f}"
    text = text_of(app)
    assert "**Plan: 1 replica × 1 GPU(s) = 1 GPU**, **$2.00/hour** ($1,460/month)" in text  # 730 h/month


def test_the_plan_counts_the_memory_ceiling_when_it_binds() -> None:
    # 480,256 KV tokens (the memory KPIs) hold 480,256 // (1,024 + 256) = 375 default requests; 1,000 users need
    # ceil(1000 / 375) = 3 replicas for memory. Without SLOs the speed plan alone is 1 replica.
    app = run_app({"users": "1000", "ttft": "none", "itl": "none"})
    assert metrics(app)["KV cache tokens"] == "480,256"
    assert 480_256 // 1280 == 375 and math.ceil(1000 / 375) == 3
    text = text_of(app)
    assert ("Memory ceiling: **3 replicas** to hold 1,000 concurrent requests (375 per replica at p95 lengths; "
            "memory only, no SLO)") in text
    assert "Speed ceiling: **1 replica** to serve the load (no SLO set)" in text
    assert "**Plan: 3 replicas × 1 GPU(s) = 3 GPUs**" in text and "the memory ceiling binds" in text


def test_the_two_ceilings_chart_marks_the_kv_limit_max_num_seqs_and_the_slo() -> None:
    app = run_app({"itl": "40"})
    figure = next(f for f in (json.loads(c.proto.spec) for c in app.get("plotly_chart"))
                  if f["layout"]["title"]["text"].startswith("Two ceilings"))
    notes = [a["text"] for a in figure["layout"]["annotations"]]
    # vLLM 0.34's default max_num_seqs on an H100 is 1024; the KV cache holds 480,256 // 1,280 = 375 requests
    # at the default lengths' mean (1,024 + 256).
    assert notes == ["KV cache: 375", "max_num_seqs: 1024", "ITL SLO 40 ms"]


def test_the_speed_inputs_are_in_the_share_link() -> None:
    app = run_app({"rate": "12.5", "ttft": "1500"})
    assert app.radio(key="plan_speed_load").value == "request rate"
    assert app.number_input(key="plan_speed_request_rate").value == 12.5
    app.number_input(key="plan_speed_tpot_ms").set_value(30.0).run()
    link = {k: v[-1] if isinstance(v, list) else v for k, v in app.query_params.items()}
    assert (link["rate"], link["ttft"], link["itl"]) == ("12.5", "1500", "30")


def test_bad_link_values_get_one_clear_line_each() -> None:
    app = run_app({"rate": "fast", "price": "-3"})
    warnings = [w.value for w in app.warning]
    assert ("Share link: ignored link value rate='fast': input should be a valid number, unable to parse string "
            "as a number; using the default") in warnings
    assert ("Share link: ignored link value price='-3': input should be greater than or equal to 0.01; using the "
            "default") in warnings
    assert "Tokens/s per user" in metrics(app)


def test_a_cpu_deployment_gets_no_speed_prediction() -> None:
    app = run_app({"dev": "cpu", "mem": "64", "g": "none"})
    assert "Tokens/s per user" not in metrics(app)
    assert any("The speed model covers GPUs" in i.value for i in app.info)
    assert not app.get("plotly_chart") or all("Two ceilings" not in c.proto.spec for c in app.get("plotly_chart"))


def test_a_bad_speed_input_is_one_clear_line_and_the_memory_plan_stays() -> None:
    app = run_app({})
    # NOTE: the inputs offer SpeedInputs' own range, so the one value they let through that it refuses is its
    # exclusive price cap.
    app.number_input(key="plan_speed_usd_per_gpu_hour").set_value(10_000.0).run()
    assert not app.exception
    assert [e.value for e in app.error] == [
        "**Speed inputs: Price ($ per GPU-hour): input should be less than 10000.** Fix the highlighted value in "
        "the sidebar."]
    assert "KV cache tokens" in metrics(app) and "Tokens/s per user" not in metrics(app)


def test_a_request_rate_load_without_a_rate_says_so_instead_of_planning_the_users() -> None:
    app = run_app({})
    app.radio(key="plan_speed_load").set_value("request rate").run()
    assert [e.value for e in app.error] == [
        "**Speed inputs: request rate: give the requests per second (or choose concurrent requests).** Fix the "
        "highlighted value in the sidebar."]


def test_a_measured_bandwidth_efficiency_from_the_live_page_replaces_the_fitted_one() -> None:
    # The Live page's "calibrated" link carries mbu: the decode step streams at 50 % of the H100's 2,978 GB/s
    # streaming rate instead of the fitted share.
    app = run_app({"in": "1000", "out": "1001", "mbu": "0.5"})
    assert metrics(app)["Tokens/s per user"] == f"{1 / hand_tpot_s(1000, 1001, 0.5):,.1f}"
    app.session_state["plan_speed_measured_open"] = True  # NOTE: its widgets are drawn only while it is open
    assert app.run().number_input(key="plan_speed_bandwidth_efficiency").value == 0.5


def test_a_custom_gpu_needs_its_rates_and_the_link_carries_them() -> None:
    app = run_app({"g": "none", "mem": "80"})
    assert [i.value for i in app.info] == [
        "Custom GPU has no memory bandwidth or BF16 TFLOPS: the speed model needs both (give them for a custom GPU)."]
    app = run_app({"g": "none", "mem": "80", "bw": "3350", "tflops": "989.5", "price": "2"})
    assert "Tokens/s per user" in metrics(app)
    assert "**$2.00/hour**" in text_of(app)
    assert (app.number_input(key="plan_speed_gpu_memory_bandwidth_gb_s").value,
            app.number_input(key="plan_speed_gpu_bf16_tflops").value) == (3350.0, 989.5)


# Issue 28 items 4 and 6, issue 25 items 1, 6 and 10: the issues' own links. Each used to raise (a traceback on the
# page) or show a number changed without a word; each now opens, names what it dropped, and shows real numbers.
@pytest.mark.parametrize(("link", "named"), [
    ({"u": "0.005"}, "u='0.005'"),
    ({"mbu": "5e-324", "rate": "1"}, "mbu='5e-324'"),
    ({"rate": "1e-320", "itl": "5"}, "rate='1e-320'"),
    ({"g": "none", "mem": "80", "bw": "1000", "tflops": "1e-300", "mfu": "1e-300"}, "tflops='1e-300'"),
    ({"mfu": "5e-324"}, "mfu='5e-324'"),
    ({"price": "1e-300"}, "price='1e-300'"),
    ({"mem": "0.1", "g": "none"}, "mem='0.1'"),
])
def test_the_issues_links_open_and_name_what_they_dropped(link, named) -> None:
    app = run_app(link)
    assert any(named in w.value for w in app.warning), [w.value for w in app.warning]
    shown = " ".join([*metrics(app).values(), *(m.value for m in app.markdown), *(c.value for c in app.caption)])
    assert "nan" not in shown.replace("nanoseconds", "") and "$0.00" not in shown


def test_gpu_memory_below_the_engines_floor_is_named_not_raised_silently() -> None:
    app = run_app({"mem": "0.1"})
    assert "Share link: ignored link value mem='0.1': input should be greater than or equal to 0.25; using the " \
           "default" in [w.value for w in app.warning]
    assert app.number_input(key="plan_gpu_memory_gib").value is None  # the catalog GPU's own memory


def test_an_slo_no_replica_count_meets_is_not_called_met() -> None:
    app = run_app({"itl": "5"})
    plan = next(m.value for m in app.markdown if m.value.startswith("**Plan:"))
    assert "to meet the SLOs" not in plan
    assert "- Speed ceiling: no replica count meets the SLOs; at **1 replica** each serves its smallest share" in plan
    # one user at the default 1,024 + 256 tokens: the hand-computed decode step
    itl = f"{hand_tpot_s(1024, 256) * 1e3:.3g} ms"
    assert [w.value for w in app.warning] == [f"Even at this count the SLOs are missed: ITL {itl} > 5 ms."]


def test_a_links_bandwidth_and_tflops_override_a_catalog_gpu_as_the_cli_does() -> None:
    catalog = metrics(run_app({"m": "Qwen/Qwen2.5-7B-Instruct"}))
    slowed = metrics(run_app({"m": "Qwen/Qwen2.5-7B-Instruct", "bw": "50", "tflops": "1"}))
    done = subprocess.run([sys.executable, "-m", "calculator", "speed", "--model", "Qwen/Qwen2.5-7B-Instruct",
                           "--input-tokens", "1024", "--output-tokens", "256", "--concurrency", "1",
                           "--gpu-memory-bandwidth-gb-s", "50", "--gpu-bf16-tflops", "1", "--json"],
                          capture_output=True, text=True, timeout=120, check=True)
    cli = json.loads(done.stdout)
    assert slowed["TTFT p95"] == format_ms(cli["ttft_p95_ms"]) != catalog["TTFT p95"]
    assert slowed["Tokens/s per user"] == f"{cli['per_user_tok_s']:,.1f}"
    # NOTE: prefill of 1,024 tokens through Qwen2.5-7B's ~6.5e9 non-embedding weights is 2 x 6.5e9 x 1024 = 1.3e13
    # FLOPs: at 1 TFLOPS that is at least 13 s, whatever the efficiency.
    assert cli["ttft_p95_ms"] > 13_000


def test_a_failed_cross_field_check_keeps_the_valid_model() -> None:
    app = run_app({"m": "Qwen/Qwen2.5-7B-Instruct", "g": "none", "mem": "nan"})
    assert [w.value for w in app.warning] == [
        "Share link: ignored link value mem='nan': not a finite number; using the default",
        "Share link: ignored link value g='none': give a GPU from the catalog or its memory (mem); using "
        "the default"]
    assert app.selectbox(key="plan_preset").value == "Qwen/Qwen2.5-7B-Instruct"  # a bundled preset
    assert not app.error


def test_none_in_a_link_is_read_in_any_case() -> None:
    app = run_app({"g": "None", "mem": "24"})
    assert not app.warning and app.selectbox(key="plan_gpu").value == "custom"


def test_the_per_replica_caption_counts_one_replica_and_one_request_in_the_singular() -> None:
    app = run_app({})  # the default plan: one user on one replica
    caption = next(c.value for c in app.caption if c.value.startswith("Per replica at the planned"))
    assert caption.startswith("Per replica at the planned 1 replica, each serving 1 concurrent request; ")


def test_under_a_request_rate_below_the_engines_limit_the_arrivals_limit_concurrency() -> None:
    """Issue 29 item 8: 1 request/s of the default lengths keeps a few requests running, far below the 375 the
    KV cache holds: the caption names the arrival rate, not kv_cache."""
    app = run_app({"rate": "1"})
    caption = next(c.value for c in app.caption if c.value.startswith("Per replica at the planned"))
    # the KV cache holds 375 requests of the default lengths (see the two-ceilings test above)
    assert "served concurrency limited by the arrival rate (" in caption
    assert " of the 375 requests the kv_cache allows run on average)" in caption
    # issue 19 item 1: the TTFT percentiles say which arrival pattern they assume
    assert any(c.value.startswith("TTFT figures assume the steady load: Poisson arrivals at 1 req/s")
               for c in app.caption)


def test_the_speed_section_says_when_its_spread_is_widened_off_the_measured_runs() -> None:
    inside = run_app({"len": "4096"})
    assert not [w.value for w in inside.warning if "measured run" in w.value]
    assert any(c.value.startswith("Measured spread (") for c in inside.caption)
    volta = run_app({"g": "v100-sxm2-32gb", "len": "4096"})
    notes = [w.value for w in volta.warning if "measured run" in w.value]
    assert len(notes) == 1 and notes[0].startswith("No measured run on the volta generation: the band is widened.")


def test_the_speed_section_says_where_speculation_stops_paying():
    # Accepting nothing, each step still verifies 3 + 1 query tokens per request for one token gained: by hand the
    # step is never cheaper than the plain one, so speculation lowers TPOT at no concurrency at all.
    app = run_app({"in": "1000", "out": "200", "spec": "ngram", "ntok": "3", "accept": "0"})
    assert "Speculative decoding does not lower TPOT at any concurrency tried: turn it off." in text_of(app)
    # EAGLE-3 (typical acceptance): the page states the concurrency the speed CLI's --json reports for the same plan
    app = run_app({"in": "1000", "out": "200", "spec": "eagle3"})
    from calculator import Scenario, estimate
    from calculator.speed.speculation import speculation_gain
    from calculator.speed.traffic import Traffic

    gain = speculation_gain(estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", speculative_method="eagle3")),
                            Traffic(input_tokens=1000, output_tokens=200, concurrency=1))
    assert gain.pays_up_to is not None and gain.pays_up_to > 1
    assert (f"Speculative decoding lowers TPOT up to {gain.pays_up_to:,} concurrent requests; above that the same "
            "deployment without it decodes faster.") in text_of(app)
    assert "Speculative decoding" not in text_of(run_app({"in": "1000", "out": "200"}))


def test_chat_requests_to_vllm_0_11_0_wait_for_the_template_parse_and_the_link_keeps_the_endpoint():
    # vLLM 0.11.0 parses the chat template on every chat request (calculator/speed/front_end.py): the page says so
    # and the link carries the endpoint; completions requests, or 0.11.1, carry no such note.
    measured = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "chat_template_parse.json")
                          .read_text(encoding="utf-8"))
    parse_ms = measured["templates"]["Qwen__Qwen3-8B"]["resolve_kwargs_0_11_0_ms"]
    chat = run_app({"m": "Qwen/Qwen3-8B", "v": "0.11.0", "api": "chat"})
    assert chat.radio(key="plan_speed_endpoint").value == "chat"
    assert (f"TTFT includes the API server's front end: vLLM 0.11.0 parses the chat template on every chat request "
            f"(0.11.0's resolve_chat_template_kwargs): {parse_ms:.1f} ms for Qwen/Qwen3-8B's template, one request "
            "at a time on the API server's event loop.") in text_of(chat)
    link = {k: v[-1] if isinstance(v, list) else v for k, v in chat.query_params.items()}
    assert link["api"] == "chat"
    for params in ({"m": "Qwen/Qwen3-8B", "v": "0.11.0"}, {"m": "Qwen/Qwen3-8B", "v": "0.11.1", "api": "chat"}):
        assert "TTFT includes the API server's front end" not in text_of(run_app(params))
