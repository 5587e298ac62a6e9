"""What the deployment is asked to serve: request lengths and how many requests come (a concurrency or a rate)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..engine.workload import Workload
from ..errors import InvalidInput
from ..units import plural
from .front_end import Endpoint

MAX_TOKENS = 10_000_000


class Traffic(BaseModel):
    """Request lengths (mean, optional p95) and load: ``concurrency`` (closed loop) or ``request_rate`` (open loop).

    ``concurrency`` is requests in flight, as ``vllm bench serve --max-concurrency`` keeps them; ``request_rate``
    is Poisson arrivals per second, as ``--request-rate`` sends them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    input_tokens: int = Field(ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(ge=1, le=MAX_TOKENS)
    input_tokens_p95: int | None = Field(None, ge=1, le=MAX_TOKENS)
    output_tokens_p95: int | None = Field(None, ge=1, le=MAX_TOKENS)
    concurrency: int | None = Field(None, ge=1, le=MAX_TOKENS)
    request_rate: float | None = Field(None, gt=0, le=1e9)
    endpoint: Endpoint = "completions"  # chat requests: some vLLM versions parse the chat template each time

    @model_validator(mode="after")
    def _one_load(self) -> Traffic:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("give exactly one of concurrency (requests in flight) or request_rate (requests/s)")
        if self.input_tokens_p95 is not None and self.input_tokens_p95 < self.input_tokens:
            raise ValueError("input_tokens_p95 cannot be below the mean input_tokens")
        if self.output_tokens_p95 is not None and self.output_tokens_p95 < self.output_tokens:
            raise ValueError("output_tokens_p95 cannot be below the mean output_tokens")
        return self

    @property
    def arrival(self) -> str:
        """The arrival pattern the steady figures assume, in words (a benchmark run has its own: ``BenchLoad``)."""
        if self.request_rate is not None:
            return f"steady load: Poisson arrivals at {self.request_rate:g} req/s, the queue in its long-run state"
        return (f"steady load: {plural(self.concurrency, 'user')} in a closed loop, each sending as its last request "
                "ends (no ramp-up, no tail)")

    @property
    def prompt_p95(self) -> int:
        return self.input_tokens_p95 or self.input_tokens

    @property
    def output_p95(self) -> int:
        return self.output_tokens_p95 or self.output_tokens

    def replace(self, **changes: object) -> Traffic:
        """A copy with some fields changed, validated again (set the other load to None when switching)."""
        return Traffic.model_validate({**self.model_dump(), **changes})


def traffic_from(workload: Workload, *, concurrency: int | None = None, request_rate: float | None = None,
                 endpoint: Endpoint = "completions") -> Traffic:
    """A workload's lengths under one load; ``InvalidInput`` when the speed model cannot take them (a workload may
    have a p95 below its mean, as a server's length histograms can say; the speed model may not)."""
    if workload.output_tokens_mean < 1:
        raise InvalidInput("the speed model needs at least one output token per request (mean output tokens)")
    try:
        return Traffic(input_tokens=workload.prompt_tokens_mean, output_tokens=workload.output_tokens_mean,
                       input_tokens_p95=workload.prompt_tokens_p95, output_tokens_p95=workload.output_tokens_p95 or None,
                       concurrency=concurrency, request_rate=request_rate, endpoint=endpoint)
    except ValidationError as exc:
        raise InvalidInput(exc.errors()[0]["msg"].removeprefix("Value error, ")) from exc
