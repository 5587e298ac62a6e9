"""How long a request waits before vLLM schedules it.

Closed loop (a fixed number of users, each sending its next request when the last one ends, as
``vllm bench serve --max-concurrency``): users beyond the served concurrency wait their turn, and Little's law
gives the wait exactly. Open loop (Poisson arrivals at a rate, as ``--request-rate``): the engine is ``c`` servers
(its concurrency limit) of mean service time ``R``; Erlang C gives the chance to wait and the wait.

Before its prefill a request also waits for the step in flight when it arrives (``p95_with_step_in_flight``):
arrivals land at random in back-to-back steps, so that wait is uniform over a step: half a step on average, 0.95 of
one at the 95th percentile.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

P95_TAIL = 0.05


class QueueWait(BaseModel):
    """Time a request spends waiting for a slot (seconds); ``saturated`` when arrivals outrun the engine."""

    model_config = ConfigDict(frozen=True)
    mean_s: float
    p95_s: float
    utilisation: float  # offered load / capacity (>= 1: the queue grows without bound)
    saturated: bool
    # The M/M/c tail of an open loop, P(wait > t) = wait_probability x exp(-drain_per_s x t); None: the wait is
    # ``mean_s`` for every request (a closed loop's FCFS cycling)
    drain_per_s: float | None = None
    wait_probability: float = 0.0


def closed_loop_wait(users: int, served: int, service_s: float) -> QueueWait:
    """``users`` clients cycling through an engine that serves ``served`` at a time, each for ``service_s``.

    Throughput is served / service_s, so by Little's law a request spends users / throughput in the system:
    the wait is service_s x (users / served - 1). FCFS cycling gives every user the same wait, so p95 = mean.
    """
    if served <= 0:
        return QueueWait(mean_s=math.inf, p95_s=math.inf, utilisation=math.inf, saturated=True)
    wait = service_s * max(0.0, users / served - 1)
    return QueueWait(mean_s=wait, p95_s=wait, utilisation=min(users, served) / served, saturated=False)


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with ``offered_load`` = arrival rate x service time."""
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    # NOTE: the recursive Erlang B form stays finite for thousands of servers (no factorials).
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)
    rho = offered_load / servers
    return blocking / (1 - rho + rho * blocking)


def open_loop_wait(rate_per_s: float, servers: int, service_s: float) -> QueueWait:
    """Poisson arrivals at ``rate_per_s`` to ``servers`` slots each busy ``service_s`` per request (M/M/c)."""
    if servers <= 0 or service_s <= 0:
        return QueueWait(mean_s=math.inf, p95_s=math.inf, utilisation=math.inf, saturated=True)
    load = rate_per_s * service_s
    utilisation = load / servers
    if utilisation >= 1:
        return QueueWait(mean_s=math.inf, p95_s=math.inf, utilisation=utilisation, saturated=True)
    waits = erlang_c(servers, load)
    drain_per_s = servers / service_s - rate_per_s  # P(wait > t) = waits x exp(-drain x t)
    p95 = math.log(waits / P95_TAIL) / drain_per_s if waits > P95_TAIL else 0.0
    return QueueWait(mean_s=waits / drain_per_s, p95_s=p95, utilisation=utilisation, saturated=False,
                     drain_per_s=drain_per_s, wait_probability=waits)


def burst_wait(requests: int, served: int, request_throughput_per_s: float) -> QueueWait:
    """``requests`` submitted at once (offline batch, ``--request-rate inf``) to an engine serving ``served`` at a
    time and finishing ``request_throughput_per_s``: request i starts after (i - served) / throughput; the mean of
    that over all requests is (N - c)^2 / (2 N X), the p95 request waits (0.95 N - c) / X."""
    if requests <= served:
        return QueueWait(mean_s=0.0, p95_s=0.0, utilisation=requests / max(served, 1), saturated=False)
    excess = requests - served
    mean = excess * excess / (2 * requests * request_throughput_per_s)
    p95 = max(0.0, (1 - P95_TAIL) * requests - served) / request_throughput_per_s
    return QueueWait(mean_s=mean, p95_s=p95, utilisation=requests / served, saturated=False)


def p95_with_step_in_flight(wait: QueueWait, step_s: float) -> float:
    """The 95th percentile of the step in flight at arrival (uniform over ``step_s``) plus the queue ``wait``.

    With a fixed wait w that is w + 0.95 step. With an open loop's tail (P(W > t) = p e^-dt, independent of the
    arrival's phase) the distribution function of U + W is, for U uniform on [0, s]:
    (1 - p) min(t / s, 1) + p H(t), with H(t) = (t - (1 - e^-dt) / d) / s for t <= s and
    1 - (e^-d(t-s) - e^-dt) / (d s) beyond; the percentile is found by bisection.
    """
    if wait.saturated:
        return math.inf
    if wait.drain_per_s is None or wait.wait_probability <= 0:
        return wait.p95_s + (1 - P95_TAIL) * step_s
    if step_s <= 0:
        return wait.p95_s
    p, d, s = wait.wait_probability, wait.drain_per_s, step_s

    def below(t: float) -> float:
        if t <= s:
            return (1 - p) * t / s + p * (t + math.expm1(-d * t) / d) / s
        return 1 - p * (math.exp(-d * (t - s)) - math.exp(-d * t)) / (d * s)

    low, high = 0.0, s + wait.p95_s  # P(U + W <= s + w95) >= P(W <= w95) >= 0.95
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if below(middle) < 1 - P95_TAIL else (low, middle)
    return high
