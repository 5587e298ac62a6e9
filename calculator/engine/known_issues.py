"""Start-ups that fail on a vLLM bug although the memory arithmetic leaves room: reported, open regressions.

The budget model cannot see a regression, so these are data, like the version table: each entry is one public
report with what was run, and the verdict turns "fits" into "borderline" with the report as the reason. An entry
covers only the versions, architectures and GPUs the report shows; it is not a fitted margin.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..gpus import GpuSpec
from ..model.spec import ModelSpec
from .vllm_versions import VersionRules, VllmVersion


class KnownIssue(BaseModel):
    """One reported failure: where it applies and what was reported."""

    model_config = ConfigDict(frozen=True)
    url: str
    summary: str
    first_version: str  # inclusive
    before_version: str  # exclusive: the first release not known to fail
    architectures: tuple[str, ...]
    gpu_families: tuple[str, ...]
    tensor_parallel_size: int
    min_num_params: int  # the model size the report concerns (gpt-oss-120b, not the 20b that starts)

    def applies(self, rules: VersionRules, spec: ModelSpec, gpu: GpuSpec | None, tensor_parallel_size: int) -> bool:
        # NOTE: the architecture first: it rules out almost every deployment, and cheaply.
        return (spec.architecture in self.architectures and gpu is not None and gpu.family in self.gpu_families
                and tensor_parallel_size == self.tensor_parallel_size
                and VllmVersion.parse(self.first_version) <= rules.version < VllmVersion.parse(self.before_version)
                and spec.num_params >= self.min_num_params)


KNOWN_ISSUES = (
    KnownIssue(
        url="https://github.com/vllm-project/vllm/issues/33155",
        summary=("vLLM 0.14 runs out of memory starting gpt-oss-120b on one H100 even with max_model_len 5120 and "
                 "one sequence at gpu_memory_utilization 0.97, where 0.11.2 served 87,040 tokens x 100 sequences "
                 "(vllm-project/vllm#33155, open); the Triton MXFP4 path loads 64.38 GiB"),
        first_version="0.14.0", before_version="0.15.0", architectures=("GptOssForCausalLM",),
        gpu_families=("hopper",), tensor_parallel_size=1, min_num_params=100_000_000_000),
)


def known_issues(rules: VersionRules, spec: ModelSpec, gpu: GpuSpec | None,
                 tensor_parallel_size: int) -> tuple[KnownIssue, ...]:
    """The reported failures that cover this deployment."""
    return tuple(issue for issue in KNOWN_ISSUES if issue.applies(rules, spec, gpu, tensor_parallel_size))
