"""The Recommend page through AppTest: the ranking and every "why not" worked out by hand for a small case, the
Pareto front, the share link, rows that open the Plan page, and bad link values."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.apptest import run_with_link

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "recommend.py")
# Qwen2.5-7B-Instruct: 28 attention heads (its config.json), so TP 8 cannot split them; 1, 2 and 4 can.
QWEN7 = "Qwen/Qwen2.5-7B-Instruct"
SMALL_CASE = {"m": QWEN7, "gpus": "h100", "prices": "h100:2", "ttft": "none", "itl": "none", "budget": "3"}


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()
    st.cache_resource.clear()


run_page = partial(run_with_link, PAGE)


def ranked_rows(app: AppTest) -> list[list[str]]:
    table = next(m.value for m in app.markdown if m.value.startswith("| # | Deployment"))
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def rejected(app: AppTest) -> list[dict[str, str]]:
    frame = app.dataframe[0].value
    return frame.to_dict("records")


def test_one_h100_at_two_dollars_ranks_the_single_gpu_layouts_and_says_why_not_the_others() -> None:
    # One user, no SLOs: every layout that starts serves it with one replica. At $2/GPU-hour TP 1 costs $2.00/h
    # ($1,460 a month of 730 h); TP 2 costs $4.00/h and TP 4 $8.00/h, over the $3/h budget; TP 8 splits no 28 heads.
    app = run_page(SMALL_CASE)
    rows = ranked_rows(app)
    assert len(rows) == 4  # checkpoint or fp8 weights x auto or fp8 KV, all at TP 1
    assert {row[1].split(" · ", 2)[1] for row in rows} == {"TP 1"}
    assert all(row[2:6] == ["1", "1", "$2.00", "$1,460"] for row in rows)
    reasons = sorted({row["why not"] for row in rejected(app)})
    assert reasons == ["TP 8 does not divide the 28 attention heads", "costs $4.00/h > budget $3.00/h",
                       "costs $8.00/h > budget $3.00/h"]
    assert len(rejected(app)) == 12  # 3 TP sizes x 2 weight formats x 2 KV dtypes


def test_each_row_opens_the_plan_page_with_that_deployment_and_the_traffic() -> None:
    app = run_page({**SMALL_CASE, "users": "3", "in": "1500"})
    link = ranked_rows(app)[0][-1]
    url = link[link.index("(") + 1:-1]
    query = {key: value[-1] for key, value in parse_qs(urlsplit(url).query).items()}
    assert urlsplit(url).path == "/"  # the Plan page is the app's default page
    assert (query["m"], query["users"], query["in"], query["price"], query["ttft"], query["itl"]) == (
        QWEN7, "3", "1500", "2", "none", "none")
    assert query["len"] == "2048"  # 1,500 + 256 tokens, rounded up to a power of two


def test_the_chart_joins_the_deployments_no_other_beats_on_both_cost_and_latency() -> None:
    app = run_page({"gpus": "h100,l40s,a100", "users": "64"})
    figure = json.loads(app.get("plotly_chart")[0].proto.spec)
    every, front = figure["data"][0], figure["data"][1]
    points = list(zip(every["x"], every["y"], strict=True))
    assert front["name"] == "Pareto front" and front["x"] == sorted(front["x"])
    for cost, latency in zip(front["x"], front["y"], strict=True):
        assert not any(c <= cost and t < latency or c < cost and t <= latency for c, t in points)
    assert front["y"] == sorted(front["y"], reverse=True)  # paying more buys lower latency along the front


def test_every_input_is_in_the_share_link() -> None:
    app = run_page({"gpus": "l40s", "rate": "4", "toks": "20", "maxg": "8", "budget": "50", "out": "400"})
    assert app.radio(key="rec_speed_load").value == "request rate"
    app.number_input(key="rec_speed_ttft_p95_ms").set_value(900.0).run()
    link = {k: v[-1] if isinstance(v, list) else v for k, v in app.query_params.items()}
    assert link == {"gpus": "l40s-48gb", "rate": "4", "toks": "20", "maxg": "8", "budget": "50", "out": "400",
                    "ttft": "900"}


def test_bad_link_values_get_one_clear_line_each_and_the_page_still_works() -> None:
    app = run_page({"gpus": "h100,tpu-v9", "rate": "-1", "prices": "h100:free", "maxg": "lots"})
    warnings = [w.value for w in app.warning]
    assert "Share link: ignored GPU in the link: Unknown GPU 'tpu-v9'." in warnings
    assert "Share link: ignored price 'h100:free' in the link: write gpu:dollars per GPU-hour" in warnings
    assert ("Share link: ignored link value rate='-1': input should be greater than or equal to 0.000001; using the "
            "default") in warnings
    assert any(w.startswith("Share link: ignored link value maxg='lots'") for w in warnings)
    assert ranked_rows(app)


def test_an_unknown_model_says_so_in_one_line() -> None:
    app = run_page({"m": "nobody/no-such-model-anywhere", "gpus": "h100"})
    assert len(app.error) == 1 and "no-such-model-anywhere" in app.error[0].value


def test_a_request_rate_load_without_a_rate_says_so() -> None:
    app = run_page({"gpus": "h100"})
    app.radio(key="rec_speed_load").set_value("request rate").run()
    assert not app.exception
    assert [e.value for e in app.error] == ["**Request rate: give the requests per second (or choose concurrent "
                                            "users).**"]


# Issue 28 items 4 and 6, issue 25 item 7: the issues' own Recommend links.
def test_a_tiny_rate_is_named_instead_of_dividing_to_zero() -> None:
    app = run_page({"rate": "5e-324", **SMALL_CASE})
    assert "Share link: ignored link value rate='5e-324': input should be greater than or equal to 0.000001; using " \
           "the default" in [w.value for w in app.warning]
    assert ranked_rows(app)


@pytest.mark.parametrize("key", ["out", "out95"])
def test_a_zero_output_length_is_named_not_shown_as_one(key) -> None:
    app = run_page({key: "0", **SMALL_CASE})
    assert [w.value for w in app.warning] == [
        f"Share link: ignored link value {key}='0': below 1, the least the Recommend page takes; using the default"]
    assert not app.error  # no "p95 below the mean" after a silent change
    assert app.number_input(key="rec_output_tokens_mean").value == 256  # the default, as the warning says


def test_a_price_keeps_every_digit() -> None:
    app = run_page({**SMALL_CASE, "prices": "h100:2.123456789"})
    assert app.text_input(key="rec_prices").value == "h100-sxm-80gb:2.123456789"
    assert app.query_params["prices"] == "h100-sxm-80gb:2.123456789"  # the share link, as typed


def test_one_providers_price_list_ranks_the_gpus_it_rents_and_names_itself() -> None:
    # RunPod Serverless' active H100 PRO class: $0.00093/s x 3,600 = $3.35/h; it lists no T4.
    app = run_page({"m": QWEN7, "gpus": "h100,t4", "pset": "runpod-serverless-active", "ttft": "none",
                    "itl": "none"})
    assert app.selectbox(key="rec_price_set").value == "runpod-serverless-active"
    rows = ranked_rows(app)
    assert rows and all(" · ".join(row[1].split(" · ")[:1]).startswith("H100") for row in rows)
    assert rows[0][4] == "$3.35"
    assert any("RunPod Serverless, active workers, one provider and one tier" in e.label for e in app.expander)
    assert "no price for T4 16GB (give one to rank it)" in {row["why not"] for row in rejected(app)}
    assert app.query_params["pset"] in ("runpod-serverless-active", ["runpod-serverless-active"])


def test_each_row_shows_its_ttft_p95_band_and_whether_the_slo_is_at_risk() -> None:
    # No SLO: nothing can be at risk. A TTFT p95 SLO between a row's estimate and its band's pessimistic edge:
    # that row is "at risk" and says why.
    rows = ranked_rows(run_page(SMALL_CASE))
    assert all(row[9] == "met" and "–" in row[8] for row in rows)
    low, high = (float(v.removesuffix(" ms")) for v in rows[0][8].split("–"))
    point = float(rows[0][7].removesuffix(" ms"))
    assert low < point < high
    slo = round((point + high) / 2, 1)
    risky = ranked_rows(run_page({**SMALL_CASE, "ttft": str(slo)}))
    assert any(row[9].startswith("**at risk**: TTFT p95") for row in risky)


def test_lora_and_speculative_decoding_reach_every_candidate_the_link_and_the_rows_plan_links() -> None:
    features = {"lora": "1", "loras": "4", "lrank": "64", "spec": "ngram", "ntok": "3"}
    app = run_page({**SMALL_CASE, **features})
    assert not app.exception, [e.value for e in app.exception]
    assert app.checkbox(key="rec_enable_lora").value is True
    assert app.selectbox(key="rec_speculative_method_choice").value == "n-gram (prompt look-up)"
    link = {k: v[-1] if isinstance(v, list) else v for k, v in app.query_params.items()}
    assert {k: link[k] for k in features} == features
    row = ranked_rows(app)[0][-1]
    query = {key: value[-1] for key, value in parse_qs(urlsplit(row[row.index("(") + 1:-1]).query).items()}
    assert {k: query[k] for k in features} == features


def test_hf_overrides_reach_every_candidate_the_link_and_the_rows_plan_links() -> None:
    # issue 25 item 4: the model vLLM builds with the overrides is the one ranked
    overrides = '{"num_hidden_layers":14}'
    app = run_page({**SMALL_CASE, "hfo": overrides})
    assert not app.exception, [e.value for e in app.exception]
    assert app.text_input(key="rec_hf_overrides_text").value == overrides
    link = {k: v[-1] if isinstance(v, list) else v for k, v in app.query_params.items()}
    assert link["hfo"] == overrides
    row = ranked_rows(app)[0][-1]
    query = {key: value[-1] for key, value in parse_qs(urlsplit(row[row.index("(") + 1:-1]).query).items()}
    assert query["hfo"] == overrides
    # the ranked TPOT is the recommender's for the 14-layer model (read back from the same link), not the 28-layer one
    from calculator.model.model_source import load_model_spec
    from calculator.speed.summary import recommendations_summary
    from calculator.url_state import read_recommend_link

    asked = read_recommend_link(link)
    best = recommendations_summary(asked.request.run(load_model_spec(QWEN7), asked.workload,
                                                     asked.speed))["by_cost_per_hour"][0]
    plain = recommendations_summary(asked.request.model_copy(update={"hf_overrides": None}).run(
        load_model_spec(QWEN7), asked.workload, asked.speed))["by_cost_per_hour"][0]
    assert ranked_rows(app)[0][10] == f"{best['tpot_ms']:.1f} ms" != f"{plain['tpot_ms']:.1f} ms"


def test_a_benchmark_load_is_what_ttft_is_judged_on_and_a_bad_line_is_one_sentence() -> None:
    bench = "vllm bench serve --dataset-name random --random-input-len 100 --random-output-len 8 --max-concurrency 2"
    app = run_page({**SMALL_CASE, "bench": bench})
    assert any(c.value.startswith("TTFT p95 and its band assume the benchmark load on one replica (closed loop of 2 "
                                  "clients") and "first 100 of its 1,000 prompts simulated" in c.value
               for c in app.caption)
    assert len(ranked_rows(app)) == 4 and app.query_params["bench"] in (bench, [bench])
    app = run_page({**SMALL_CASE, "bench": "--dataset-name sharegpt"})
    assert not app.exception
    assert any("--dataset-name sharegpt is not modelled" in w.value for w in app.warning)
