"""``vllm bench serve`` as it runs: a step-by-step simulation of vLLM V1's scheduler under the benchmark's load.

The load is the benchmark client's (``vllm/benchmarks/serve.py``, 0.32.0): ``--num-prompts`` requests, sent as
their arrival times say (all at once for ``--request-rate inf``; Poisson, or gamma with ``--burstiness``, rescaled so
the last one leaves at num_prompts / rate), each waiting for one of ``--max-concurrency`` client slots, so a closed
loop starts with a burst of C prompts and then sends one request each time one ends. TTFT is timed from the moment a
request leaves the client (after its slot), so the client's own queue is not in it.

The engine is vLLM V1's scheduler: every step it first gives each running request its tokens (one decode token, or
the next chunk of a prompt), then admits waiting requests first-come first-served while ``max_num_seqs`` and the
token budget ``max_num_batched_tokens`` allow, chunking the last prompt to what the budget leaves; a request whose
KV blocks do not fit preempts the newest running request (its KV is dropped and recomputed later, but for the full
blocks the prefix cache still holds when it is rescheduled). A request reaches the engine after the API server's
event loop has done its synchronous work (``_FrontEnd``), and one that arrives while a step runs waits for the next.
A step's time comes from a ``StepCost`` (the roofline of ``step_time.py`` for a GPU, or times measured on a server),
so the scheduler half is hardware independent.

Stretches of decode-only steps in which nothing arrives, finishes or runs out of KV are advanced in one go (the waves
of fixed-length runs), so a few hundred requests take milliseconds.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from calculator.speed.front_end import Endpoint
from calculator.speed.legacy_numpy_random import LegacyRandomState
from calculator.speed.step_spread import StepSpread, bucket_quantile

MS = 1e3
MAX_SIMULATED_STEPS = 5_000_000  # a guard against a load that never drains (it cannot, but a bug must not hang)


@dataclass(frozen=True)
class StepBatch:
    """What one engine step runs: the decoding requests (one token each, at a mean context) and prompt chunks
    (tokens, tokens of that prompt already computed)."""

    decode_requests: int
    decode_context_tokens: float
    prefill_chunks: tuple[tuple[int, int], ...] = ()

    @property
    def tokens(self) -> int:
        return self.decode_requests + sum(chunk for chunk, _ in self.prefill_chunks)


StepCost = Callable[[StepBatch], float]  # seconds one step takes


class EngineLimits(BaseModel):
    """The scheduler's limits and the per-request time outside the engine step (HTTP, tokenizer, detokenizer)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    kv_cache_tokens: int = Field(ge=1)  # usable KV slots (blocks x block size)
    block_size: int = Field(16, ge=1)
    request_overhead_s: float = Field(0.0, ge=0)  # from the client's send to the engine's waiting queue
    # The API server's synchronous work per request (parsing it, its chat template, ...): it runs on the server's
    # one event loop, one request at a time, so requests that arrive together queue for it (``_FrontEnd``).
    front_end_s: float = Field(0.0, ge=0)
    # V1's prefix cache (on by default): a preempted request's full blocks keep their hashes while free, so it finds
    # them again when it is rescheduled, unless other requests' allocations evicted them meanwhile.
    prefix_caching: bool = False


class BenchLoad(BaseModel):
    """The requests of one ``vllm bench serve`` run and how the client sends them."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    input_tokens: tuple[int, ...] = Field(min_length=1)  # prompt tokens per request, as the engine counts them
    output_tokens: tuple[int, ...] = Field(min_length=1)  # tokens generated per request (--ignore-eos: all of them)
    max_concurrency: int | None = Field(None, ge=1)
    request_rate: float | None = Field(None, gt=0)  # None: inf, every request at once
    burstiness: float = Field(1.0, gt=0)
    seed: int = 0
    special_tokens: int = Field(0, ge=0)  # of each prompt, added by the server's tokenizer (the client counts without)
    # ``vllm bench serve`` sends the first prompt before the run (its ready check, and each --num-warmups request)
    test_prompt: bool = False
    # ... and the server caches prefixes (V1's default), so the run's first request finds that prompt's blocks
    first_prompt_cached: bool = False
    # Tokens of each prompt the engine finds in its prefix cache before the run (empty: none but the test prompt's):
    # a harness that sends the same seeded prompts in every run of a sweep, so a later run finds an earlier one's
    cached_prompt_tokens: tuple[int, ...] = ()
    # The server endpoint the client posts to: a chat request's template some vLLM versions parse every time
    # (calculator/speed/front_end.py)
    endpoint: Endpoint = "completions"

    @model_validator(mode="after")
    def _one_cached_count_per_prompt(self) -> BenchLoad:
        if self.cached_prompt_tokens and len(self.cached_prompt_tokens) != len(self.input_tokens):
            raise ValueError(f"{len(self.cached_prompt_tokens)} cached-token counts for {len(self.input_tokens)} "
                             "prompts")
        if any(not 0 <= cached < prompt for cached, prompt in zip(self.cached_prompt_tokens, self.input_tokens)):
            raise ValueError("a prompt's cached tokens must be fewer than its tokens (vLLM recomputes the last one)")
        return self

    @property
    def num_prompts(self) -> int:
        return len(self.input_tokens)

    @property
    def arrival(self) -> str:
        """The arrival pattern in words (every figure of the run assumes it)."""
        if self.request_rate is None:
            sent = f"all {self.num_prompts} requests at once"
        elif math.isinf(self.burstiness):
            sent = f"{self.num_prompts} requests evenly spaced at {self.request_rate:g} req/s"
        else:
            shape = "Poisson" if self.burstiness == 1 else f"gamma-distributed (burstiness {self.burstiness:g})"
            sent = f"{self.num_prompts} requests, {shape} arrivals at {self.request_rate:g} req/s"
        if self.max_concurrency is None:
            return sent
        burst = min(self.max_concurrency, self.num_prompts)
        closed = (f"closed loop of {self.max_concurrency} clients: a burst of {burst} prompts at the start, then one "
                  "request as each ends")
        return closed if self.request_rate is None else f"{sent}, at most {self.max_concurrency} in flight"

    def arrival_times_s(self) -> list[float]:
        """When each request is ready to send, as ``get_request`` spaces them (before the concurrency limit).

        NOTE: vLLM seeds numpy's global generator with ``--seed`` and draws each gap from it; the same draws
        (``LegacyRandomState``) give the run's very arrival times, then the total is rescaled to num_prompts / rate
        exactly as vLLM does. ``ValueError`` for a seed numpy refuses (vLLM fails on it too).
        """
        n = self.num_prompts
        if self.request_rate is None:
            return [0.0] * n
        if math.isinf(self.burstiness):
            gaps = [1.0 / self.request_rate] * n
        else:
            draw = LegacyRandomState(self.seed)
            theta = 1.0 / (self.request_rate * self.burstiness)
            gaps = [draw.gamma(self.burstiness, theta) for _ in range(n)]
        times, total = [], 0.0
        for gap in gaps:
            total += gap
            times.append(total)
        scale = (n / self.request_rate) / times[-1] if times[-1] > 0 else 1.0
        return [t * scale for t in times]


class BenchFigures(BaseModel):
    """The "Serving Benchmark Result" block (ms and per-second figures, ``--save-result``'s key names)."""

    model_config = ConfigDict(frozen=True)
    arrival: str
    completed: int
    total_input_tokens: int
    total_output_tokens: int
    duration_s: float
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    p99_itl_ms: float
    mean_e2el_ms: float
    median_e2el_ms: float
    p99_e2el_ms: float
    # as the server's histograms time them: waiting queue (from the engine loop taking the request in, between two
    # steps, to its first step), then prefill (its first step to its first token)
    mean_queue_ms: float
    mean_prefill_ms: float
    # NOTE: before its queue time a request that reaches the engine while a step runs waits for that step to end;
    # vLLM's server counts this wait in its TTFT but in none of its queue, prefill or decode histograms.
    mean_intake_wait_ms: float
    preemptions: int
    steps: int
    # NOTE: the steps in which some request got a token. vLLM's front end makes IterationStats only for a step whose
    # outputs are not empty (AsyncLLM.output_handler, 0.32: ``IterationStats() if (log_stats and num_outputs)``), so
    # ``vllm:iteration_tokens_total`` never counts a step that ran nothing but a prompt's middle chunk.
    reported_steps: int = 0
    # NOTE: vLLM prints p99 unless --metric-percentiles asks for more; the recommender ranks on the p95 SLO.
    p95_ttft_ms: float = 0.0

    def render(self) -> str:
        """The block as vLLM prints it, and the arrival it assumed."""
        rows: list[tuple[str, str]] = [
            ("Successful requests:", f"{self.completed}"),
            ("Benchmark duration (s):", f"{self.duration_s:.2f}"),
            ("Total input tokens:", f"{self.total_input_tokens}"),
            ("Total generated tokens:", f"{self.total_output_tokens}"),
            ("Request throughput (req/s):", f"{self.request_throughput:.2f}"),
            ("Output token throughput (tok/s):", f"{self.output_throughput:.2f}"),
            ("Total token throughput (tok/s):", f"{self.total_token_throughput:.2f}"),
        ]
        for title, key in (("Time to First Token", "ttft"), ("Time per Output Token (excl. 1st token)", "tpot"),
                           ("Inter-token Latency", "itl"), ("End-to-end Latency", "e2el")):
            rows.append((f"-{title}-", ""))
            label = key.upper() if key != "e2el" else "E2EL"
            for which in ("mean", "median", "p99"):
                rows.append((f"{which.capitalize() if which != 'p99' else 'P99'} {label} (ms):",
                             f"{getattr(self, f'{which}_{key}_ms'):.2f}"))
        lines = ["{s:{c}^{n}}".format(s=" Predicted Serving Benchmark Result ", n=50, c="=")]
        for label, value in rows:
            lines.append("{s:{c}^{n}}".format(s=label, n=50, c="-") if label.startswith("-")
                         else f"{label:<40} {value:<10}")
        lines.append("=" * 50)
        lines.append(f"arrival (every figure above): {self.arrival}")
        lines.append("the means include the ramp-up (the first burst's queued prompts) and the tail (the last "
                     "requests running alone)")
        if self.preemptions:
            lines.append(f"KV cache full: {self.preemptions} preemption(s) (recomputed prompts)")
        return "\n".join(lines)


def percentile(values: Sequence[float], p: float) -> float:
    """numpy.percentile's default (linear) of an already sorted list."""
    return weighted_percentile([(v, 1) for v in values], p)


def weighted_percentile(pairs: Sequence[tuple[float, int]], p: float) -> float:
    """numpy.percentile (linear) of the list in which each value appears ``count`` times; ``pairs`` sorted."""
    n = sum(count for _, count in pairs)
    if n == 0:
        return 0.0
    rank = (n - 1) * p / 100
    low, fraction = int(math.floor(rank)), rank - math.floor(rank)
    below = _at(pairs, low)
    above = _at(pairs, min(low + 1, n - 1))
    return below + (above - below) * fraction


def _at(pairs: Sequence[tuple[float, int]], index: int) -> float:
    seen = 0
    for value, count in pairs:
        seen += count
        if index < seen:
            return value
    return pairs[-1][0]


@dataclass
class _Request:
    index: int
    prompt: int
    output: int
    sent_s: float = 0.0  # left the client (after its concurrency slot)
    reached_s: float = 0.0  # reached the engine process (after the time outside the engine)
    queued_s: float = 0.0  # taken in by the engine loop, between two steps (vLLM's queue time begins here)
    computed: int = 0  # tokens whose KV is computed
    generated: int = 0
    scheduled_s: float | None = None  # first scheduled (vLLM's queue time ends here, its prefill time begins)
    first_token_s: float | None = None
    last_token_s: float = 0.0
    done_s: float = 0.0
    blocks: int = 0
    cached: list | None = None  # after a preemption under prefix caching: its free blocks still cached, [count]

    @property
    def due(self) -> int:
        """Tokens to compute before the next token comes out: the prompt's chunks at first, one per decode step,
        and after a preemption everything again (vLLM V1 recomputes the prompt and what was generated)."""
        return self.prompt + self.generated - self.computed

    @property
    def decoding(self) -> bool:
        return self.generated > 0 and self.due == 1


@dataclass
class _Engine:
    """The scheduler's queues and the KV block pool.

    Free blocks are kept in the order they were freed, as vLLM's ``FreeKVCacheBlockQueue`` does: an allocation takes
    the least recently freed first, and a request frees its blocks last first, so a preempted request's prefix is
    the last of its blocks to be evicted. ``free_order`` holds runs of ``[count, owner]``: owner None for blocks whose
    contents no one will ask for again, or the preempted request whose cached prefix they are."""

    limits: EngineLimits
    free_blocks: int
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    preemptions: int = 0
    free_order: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.free_order.append([self.free_blocks, None])

    def _take(self, count: int) -> None:
        """Take ``count`` free blocks, least recently freed first, evicting cached prefixes on the way."""
        self.free_blocks -= count
        while count:
            run = self.free_order[0]
            taken = min(run[0], count)
            run[0] -= taken
            count -= taken
            if run[1] is not None:
                run[1].cached[0] -= taken
            if run[0] == 0:
                self.free_order.popleft()

    def _allocate(self, request: _Request, tokens: int) -> bool:
        needed = max(0, -(-tokens // self.limits.block_size) - request.blocks)
        if needed > self.free_blocks:
            return False
        self._take(needed)
        request.blocks += needed
        return True

    def release(self, request: _Request) -> None:
        self.free_blocks += request.blocks
        self.free_order.append([request.blocks, None])
        request.blocks = 0

    def preempt(self, request: _Request) -> None:
        """Free a running request's blocks; with prefix caching its full blocks stay cached until evicted."""
        full = min(request.computed // self.limits.block_size, request.blocks) if self.limits.prefix_caching else 0
        self.free_blocks += request.blocks
        self.free_order.append([request.blocks - full, None])  # the partial last block goes first
        if full:
            request.cached = [full]
            self.free_order.append([full, request])
        request.blocks = 0
        request.computed = 0

    def _cached_hit_blocks(self, request: _Request) -> int:
        """Blocks of a preempted request still cached, as ``get_computed_blocks`` finds them (at most all tokens but
        the last, which is recomputed for its logits)."""
        if request.cached is None:
            return 0
        return min(request.cached[0], (request.prompt + request.generated - 1) // self.limits.block_size)

    def _reclaim(self, request: _Request, blocks: int) -> None:
        """Give a rescheduled request back ``blocks`` of its cached prefix; the rest of it is no one's now."""
        for run in self.free_order:
            if run[1] is request:
                run[0] -= blocks
                run[1] = None
                break
        self.free_order = deque(run for run in self.free_order if run[0])
        self.free_blocks -= blocks
        request.blocks, request.computed, request.cached = blocks, blocks * self.limits.block_size, None

    def schedule(self) -> list[tuple[_Request, int]]:
        """One step's work, as V1's ``Scheduler.schedule``: running requests first (preempting the newest running
        request when KV runs out), then waiting ones while nothing was preempted."""
        budget = self.limits.max_num_batched_tokens
        scheduled: list[tuple[_Request, int]] = []
        preempted = False
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            tokens = min(request.due, budget)
            while not self._allocate(request, request.computed + tokens):
                victim = self.running.pop()
                self.preempt(victim)
                self.waiting.appendleft(victim)
                self.preemptions += 1
                preempted = True
                if victim is request:
                    break
            else:
                scheduled.append((request, tokens))
                budget -= tokens
                index += 1
                continue
            break
        while self.waiting and budget > 0 and len(self.running) < self.limits.max_num_seqs and not preempted:
            request = self.waiting[0]
            hit = self._cached_hit_blocks(request)
            computed = hit * self.limits.block_size if request.cached is not None else request.computed
            tokens = min(request.prompt + request.generated - computed, budget)
            # NOTE: the cached blocks are free until touched, so they count against the free blocks here (vLLM's
            # allocate_slots adds the evictable computed blocks to those it needs); nothing is touched when it
            # does not fit.
            wanted = -(-(computed + tokens) // self.limits.block_size) - request.blocks - hit
            if wanted + hit > self.free_blocks:
                break
            if request.cached is not None:
                self._reclaim(request, hit)
            self._allocate(request, request.computed + tokens)
            self.running.append(self.waiting.popleft())
            scheduled.append((request, tokens))
            budget -= tokens
        return scheduled


class _FrontEnd:
    """The API server's event loop, which runs each request's synchronous preprocessing in turn.

    A request's handler runs its preprocessing (``front_end_s``) to its first ``await`` (the tokenizer's thread),
    and its continuation, which hands the request to the engine, goes to the back of the loop's ready queue: behind
    the preprocessing of every request that arrived before it finished. So a burst of N requests reaches the engine
    together, after N preprocessings, and a request arriving at an idle loop after one.
    NOTE: the continuation's own work (the engine client's ``add_request``) is counted in ``front_end_s``.
    """

    def __init__(self, front_end_s: float) -> None:
        self.front_end_s = front_end_s
        self.free_s = 0.0  # when the loop ends the preprocessing queued so far
        self.sent: list[tuple[float, float]] = []  # (reached the loop, preprocessed), in the order sent
        self.settled = 0  # requests of ``sent`` handed to the engine so far
        self.behind = 0  # requests of ``sent`` that reached the loop before the last settled one was preprocessed

    def take(self, sent_s: float) -> None:
        self.free_s = max(sent_s, self.free_s) + self.front_end_s
        self.sent.append((sent_s, self.free_s))

    def handed_over_s(self, position: int) -> float:
        """When the ``position``-th request sent reaches the engine client: once the loop has preprocessed every
        request that reached it before this one's preprocessing ended (sends come in time order, so a pointer)."""
        preprocessed_s = self.sent[position][1]
        while self.behind < len(self.sent) and self.sent[self.behind][0] < preprocessed_s:
            self.behind += 1
        return max(preprocessed_s, self.sent[self.behind - 1][1]) if self.behind else preprocessed_s

    def settle(self, now: float) -> list[tuple[float, int]]:
        """(handed over, position) of every request preprocessed by ``now``: later sends cannot reach the loop
        before ``now``, so nothing can queue ahead of their continuations any more."""
        settled = []
        while self.settled < len(self.sent) and self.sent[self.settled][1] <= now:
            settled.append((self.handed_over_s(self.settled), self.settled))
            self.settled += 1
        return settled

    def earliest_s(self) -> float | None:
        """A lower bound on when the next unsettled request is handed over."""
        return self.sent[self.settled][1] if self.settled < len(self.sent) else None


class _Client:
    """The benchmark client: requests in order, each sent when it is due and one of the slots is free, then
    preprocessed by the server's front end (``_FrontEnd``) before the time outside the engine brings it there."""

    def __init__(self, load: BenchLoad, overhead_s: float, front_end_s: float = 0.0) -> None:
        self.ready = load.arrival_times_s()
        self.unsent = deque(range(load.num_prompts))
        self.free_slots = deque([0.0] * (load.max_concurrency or load.num_prompts))  # when each slot freed
        self.overhead_s = overhead_s
        self.front_end = _FrontEnd(front_end_s)
        self.order: list[int] = []  # request index by send position
        self.arrivals: list[tuple[float, int]] = []  # (reaches the engine, request index), a heap

    def send(self, now: float, requests: list[_Request]) -> None:
        """Send every request due by ``now`` that has a slot: it leaves when both it and the slot are ready; then
        hand the engine every request preprocessed by ``now``.

        NOTE: every request sent later leaves at ``now`` or after (its slot frees, or it falls due, after ``now``),
        which is what lets the front end settle up to ``now``."""
        while self.unsent and self.free_slots and self.ready[self.unsent[0]] <= now:
            request = requests[self.unsent.popleft()]
            request.sent_s = max(self.ready[request.index], self.free_slots.popleft())
            self.front_end.take(request.sent_s)
            self.order.append(request.index)
        for handed_over_s, position in self.front_end.settle(now):
            heapq.heappush(self.arrivals, (handed_over_s + self.overhead_s, self.order[position]))

    def next_event_s(self) -> float | None:
        """When the engine may next hear of a request (one already sent, or the next one due with a slot free); a
        lower bound while one is being preprocessed."""
        times = [self.arrivals[0][0]] if self.arrivals else []
        if (preprocessed_s := self.front_end.earliest_s()) is not None:
            times.append(preprocessed_s + self.overhead_s)
        if self.unsent and self.free_slots:
            due_s = max(self.ready[self.unsent[0]], self.free_slots[0])
            times.append(max(due_s, self.front_end.free_s) + self.front_end.front_end_s + self.overhead_s)
        return min(times) if times else None


def cached_test_prompt_tokens(prompt_tokens: int, block_size: int) -> int:
    """Prompt tokens of the run's first request that the engine finds in its prefix cache.

    When ``vllm bench serve`` sends ``input_requests[0]`` before the run (its "initial single prompt test run",
    vllm/benchmarks/serve.py), with prefix caching on the run's first request finds that prompt's full blocks
    cached; V1's ``KVCacheManager.get_computed_blocks`` caps a hit at ``prompt - 1`` tokens (the last token is
    recomputed for its logits) and counts whole blocks only."""
    return (prompt_tokens - 1) // block_size * block_size


def simulate(load: BenchLoad, limits: EngineLimits, cost: StepCost, spread: StepSpread | None = None) -> BenchFigures:
    """The printed result of ``load`` on an engine with ``limits`` whose steps take ``cost`` (each multiplied by the
    next factor of ``spread`` when one is given: a server's stalls); ``ValueError`` when a request can never fit in
    the KV cache."""
    return _figures(load, *_run(load, limits, cost, spread))


SPREAD_RUNS = 16  # seeds a spread run's figures are averaged over: one seed's p99 moved by up to 9 % (sd)


def simulate_spread(load: BenchLoad, limits: EngineLimits, cost: StepCost, spread: StepSpread,
                    runs: int = SPREAD_RUNS) -> BenchFigures:
    """Each figure's mean over ``runs`` simulations whose steps draw from ``spread`` (seeds ``spread.seed``,
    ``spread.seed + 1``, ...): the expected result, where one simulated run is one draw of where the stalls fall."""
    every = [simulate(load, limits, cost, spread.model_copy(update={"seed": spread.seed + i})) for i in range(runs)]
    floats = {key: sum(getattr(run, key) for run in every) / runs
              for key, value in every[0].model_dump().items() if isinstance(value, float)}
    return every[0].model_copy(update=floats)


def inter_token_gaps_s(load: BenchLoad, limits: EngineLimits, cost: StepCost) -> list[tuple[float, int]]:
    """The simulated run's inter-token latencies (seconds, how many token gaps had each), ascending."""
    return sorted(_run(load, limits, cost, None)[1].items())


def fit_step_spread(load: BenchLoad, limits: EngineLimits, cost: StepCost, itl_buckets: Sequence[tuple[float, float]],
                    *, seed: int = 0) -> StepSpread:
    """The spread of step times that a server's inter-token histogram over the run of ``load`` (cumulative
    ``(le, count)`` buckets, +Inf last) shows beyond the one the simulated schedule under ``cost`` already has."""
    gaps = inter_token_gaps_s(load, limits, cost)
    return StepSpread.from_quantiles(lambda q: bucket_quantile(itl_buckets, q),
                                     lambda q: weighted_percentile(gaps, 100 * q), seed=seed)


def _run(load: BenchLoad, limits: EngineLimits, cost: StepCost, spread: StepSpread | None
         ) -> tuple[list[_Request], dict[float, int], int, int, int]:
    requests = [_Request(index=i, prompt=p, output=o)
                for i, (p, o) in enumerate(zip(load.input_tokens, load.output_tokens, strict=True))]
    if load.first_prompt_cached:
        requests[0].computed = cached_test_prompt_tokens(requests[0].prompt, limits.block_size)
    for request, cached in zip(requests, load.cached_prompt_tokens):
        request.computed = max(request.computed, cached)
    usable_blocks = limits.kv_cache_tokens // limits.block_size
    longest = max(r.prompt + r.output for r in requests)
    if -(-longest // limits.block_size) > usable_blocks:
        raise ValueError(f"a request of {longest:,} tokens does not fit in the KV cache "
                         f"({usable_blocks * limits.block_size:,} tokens)")
    engine = _Engine(limits=limits, free_blocks=usable_blocks)
    client = _Client(load, limits.request_overhead_s, limits.front_end_s)
    itl: dict[float, int] = {}  # gap (s) -> how many token gaps had it
    factors = spread.draws() if spread is not None else None
    now, steps, reported_steps, finished = 0.0, 0, 0, 0
    client.send(now, requests)
    while finished < len(requests):
        while client.arrivals and client.arrivals[0][0] <= now:
            reached_s, index = heapq.heappop(client.arrivals)
            requests[index].reached_s, requests[index].queued_s = reached_s, now
            engine.waiting.append(requests[index])
        if not engine.running and not engine.waiting:
            upcoming = client.next_event_s()
            if upcoming is None:
                raise ValueError("the simulated client has nothing left to send")  # cannot happen: a guard
            now = max(now, upcoming)
            client.send(now, requests)
            continue
        scheduled = engine.schedule()
        if not scheduled:
            raise ValueError("not one waiting request fits in the KV cache")
        steps += 1
        if steps > MAX_SIMULATED_STEPS:
            raise ValueError("the simulated run did not drain")
        # NOTE: with a spread every step draws its own time, so no stretch of steps is advanced in one go.
        repeat = _steady_steps(engine, scheduled, client, cost, now) if factors is None else 1
        decodes = [r for r, _ in scheduled if r.decoding]
        chunks = tuple((n, r.computed) for r, n in scheduled if not r.decoding)
        context = sum(r.prompt + r.generated for r in decodes) / len(decodes) if decodes else 0.0
        duration = cost(StepBatch(len(decodes), context + (repeat - 1) / 2, chunks))
        if factors is not None:
            duration *= next(factors)
        start = now
        for request, _ in scheduled:
            if request.scheduled_s is None:
                request.scheduled_s = start
        now += duration * repeat
        steps += repeat - 1
        if any(request.due <= tokens * repeat for request, tokens in scheduled):
            reported_steps += repeat  # NOTE: a repeat runs decodes only, and each decode gives a token
        for request, tokens in scheduled:
            request.computed += tokens * repeat
            if request.due > 0:
                continue  # a chunk of a longer prompt: no token yet
            if request.first_token_s is None:
                request.first_token_s = now
            else:
                gap = start + duration - request.last_token_s
                itl[gap] = itl.get(gap, 0) + 1
                if repeat > 1:
                    itl[duration] = itl.get(duration, 0) + repeat - 1
            request.generated += repeat
            request.last_token_s = now
            if request.generated >= request.output:
                request.done_s = now
                engine.running.remove(request)
                engine.release(request)
                client.free_slots.append(now)
                finished += 1
        client.send(now, requests)
    return requests, itl, engine.preemptions, steps, reported_steps


def _steady_steps(engine: _Engine, scheduled: list[tuple[_Request, int]], client: _Client, cost: StepCost,
                  now: float) -> int:
    """How many identical decode-only steps can run from here before anything changes the batch (1: one step)."""
    if engine.waiting or len(scheduled) != len(engine.running) or not all(r.decoding for r, _ in scheduled):
        return 1
    steps = min(r.output - r.generated for r, _ in scheduled)
    upcoming = client.next_event_s()
    if upcoming is not None and steps > 1:
        one = cost(StepBatch(len(scheduled), sum(r.prompt + r.generated for r, _ in scheduled) / len(scheduled)))
        if one <= 0:
            return 1
        # NOTE: a request that arrives while a step runs waits for the next step, so the run stops at the step
        # in flight when it arrives.
        steps = min(steps, max(1, math.ceil((upcoming - now) / one)))
    # NOTE: KV grows one token per request per step; stop before any request needs a block the cache lacks.
    growth = sum(max(0, -(-(r.computed + steps) // engine.limits.block_size) - r.blocks) for r, _ in scheduled)
    return max(1, steps) if growth <= engine.free_blocks else 1


def _figures(load: BenchLoad, requests: list[_Request], gaps: dict[float, int], preemptions: int,
             steps: int, reported_steps: int) -> BenchFigures:
    ttft = sorted(r.first_token_s - r.sent_s for r in requests)
    e2e = sorted(r.done_s - r.sent_s for r in requests)
    tpot = sorted((r.done_s - r.first_token_s) / (r.output - 1) for r in requests if r.output > 1)
    itl = sorted(gaps.items())
    itl_count = sum(c for _, c in itl)
    duration = max(r.done_s for r in requests)
    total_in = sum(load.input_tokens) - load.special_tokens * len(requests)
    total_out = sum(load.output_tokens)

    def stats(values: list[float]) -> tuple[float, float, float]:
        if not values:
            return 0.0, 0.0, 0.0
        return sum(values) / len(values) * MS, percentile(values, 50) * MS, percentile(values, 99) * MS

    (mt, md, pt), (mp, mdp, pp), (me, mde, pe) = stats(ttft), stats(tpot), stats(e2e)
    mean_itl = sum(v * c for v, c in itl) / itl_count * MS if itl_count else 0.0
    return BenchFigures(
        arrival=load.arrival, completed=len(requests), total_input_tokens=total_in, total_output_tokens=total_out,
        duration_s=duration, request_throughput=len(requests) / duration, output_throughput=total_out / duration,
        total_token_throughput=(total_in + total_out) / duration,
        mean_ttft_ms=mt, median_ttft_ms=md, p99_ttft_ms=pt, mean_tpot_ms=mp, median_tpot_ms=mdp, p99_tpot_ms=pp,
        mean_itl_ms=mean_itl, median_itl_ms=weighted_percentile(itl, 50) * MS,
        p99_itl_ms=weighted_percentile(itl, 99) * MS, mean_e2el_ms=me, median_e2el_ms=mde, p99_e2el_ms=pe,
        mean_queue_ms=sum(r.scheduled_s - r.queued_s for r in requests) / len(requests) * MS,
        mean_prefill_ms=sum(r.first_token_s - r.scheduled_s for r in requests) / len(requests) * MS,
        mean_intake_wait_ms=sum(r.queued_s - r.reached_s for r in requests) / len(requests) * MS,
        preemptions=preemptions, steps=steps, reported_steps=reported_steps, p95_ttft_ms=percentile(ttft, 95) * MS if ttft else 0.0)


class LinearStepCost(BaseModel):
    """A step that costs ``fixed_s`` plus ``per_token_s`` for each token it runs: what a server's own histograms
    pin down (``fit_linear_step_cost``), for engines whose roofline the planner does not know (a CPU server)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    fixed_s: float = Field(ge=0)
    per_token_s: float = Field(ge=0)

    def __call__(self, batch: StepBatch) -> float:
        return self.fixed_s + self.per_token_s * batch.tokens


_FIT_ROUNDS = 4
_BISECTION_ROUNDS = 30


def fit_linear_step_cost(load: BenchLoad, limits: EngineLimits, *, mean_itl_s: float,
                         mean_prefill_s: float) -> LinearStepCost:
    """The step cost under which ``load`` shows the measured mean inter-token latency and mean prefill time (the
    server's ``inter_token_latency_seconds`` and ``request_prefill_time_seconds`` over the same run).

    Both means are linear in the two terms for a given schedule (a closed loop's schedule does not depend on time),
    so a few Newton rounds from the ITL alone settle them; a negative per-token term (prefills no dearer than
    decodes: per-step overhead dominates) is held at zero, and the fixed term then carries the ITL.
    """
    cost = LinearStepCost(fixed_s=mean_itl_s, per_token_s=0.0)
    for _ in range(_FIT_ROUNDS):
        base = simulate(load, limits, cost)
        more_fixed = simulate(load, limits, cost.model_copy(update={"fixed_s": cost.fixed_s * 1.5}))
        more_token = simulate(load, limits, cost.model_copy(update={"per_token_s": cost.per_token_s + 1e-6}))
        step_a, step_b = cost.fixed_s * 0.5, 1e-6
        j11 = (more_fixed.mean_itl_ms - base.mean_itl_ms) / MS / step_a
        j12 = (more_token.mean_itl_ms - base.mean_itl_ms) / MS / step_b
        j21 = (more_fixed.mean_prefill_ms - base.mean_prefill_ms) / MS / step_a
        j22 = (more_token.mean_prefill_ms - base.mean_prefill_ms) / MS / step_b
        r1 = mean_itl_s - base.mean_itl_ms / MS
        r2 = mean_prefill_s - base.mean_prefill_ms / MS
        determinant = j11 * j22 - j12 * j21
        if abs(determinant) < 1e-12:
            break
        fixed = cost.fixed_s + (r1 * j22 - r2 * j12) / determinant
        per_token = cost.per_token_s + (j11 * r2 - j21 * r1) / determinant
        if per_token < 0 or fixed <= 0:
            return LinearStepCost(fixed_s=mean_itl_s, per_token_s=0.0)
        cost = LinearStepCost(fixed_s=fixed, per_token_s=per_token)
    return cost


def fit_measured_run(load: BenchLoad, limits: EngineLimits, *, mean_ttft_s: float, mean_queue_s: float,
                     mean_prefill_s: float, mean_itl_s: float) -> tuple[LinearStepCost, float]:
    """The step cost and the per-request time outside the engine (``request_overhead_s``) under which ``load``
    shows the means of a server's TTFT, queue, prefill and inter-token histograms over the same run.

    That time is the server's part only: its TTFT runs from its front end taking the request to the first token
    leaving it, so a client that times its own requests also sees its lag on the server (HTTP, its own work),
    which the caller adds (tests/test_bench_against_vllm.py: the client's mean TTFT less the server's).

    TTFT less queue less prefill is the time outside the engine plus the wait for the step in flight when a request
    reaches the engine (vLLM's queue time starts only when its loop takes the request in, between steps). The time
    outside is found by bisection where it and the simulated wait add up to what the server measured: their sum never
    falls as the time outside grows (a later arrival waits at most that much less), but it rises in steps where
    arrivals cross a step boundary, and then the nearer side of the step is taken.
    NOTE: not always the side above: a mean raised by a few stalled requests would then push every simulated arrival
    of a closed loop a whole step later (its median TTFT came out 38 % high in a real run).
    """
    beside_engine_s = max(0.0, mean_ttft_s - mean_queue_s - mean_prefill_s)

    def fitted(overhead_s: float) -> tuple[LinearStepCost, float]:
        with_overhead = limits.model_copy(update={"request_overhead_s": overhead_s})
        cost = fit_linear_step_cost(load, with_overhead, mean_itl_s=mean_itl_s, mean_prefill_s=mean_prefill_s)
        return cost, overhead_s + simulate(load, with_overhead, cost).mean_intake_wait_ms / MS

    low, high = 0.0, beside_engine_s
    if fitted(high)[1] <= beside_engine_s:
        return fitted(high)[0], high
    for _ in range(_BISECTION_ROUNDS):
        middle = (low + high) / 2
        low, high = (middle, high) if fitted(middle)[1] <= beside_engine_s else (low, middle)
    (below, below_sum), (above, above_sum) = fitted(low), fitted(high)
    if above_sum - beside_engine_s < beside_engine_s - below_sum:
        return above, high
    return below, low
