"""vLLM capacity planner: what vLLM will do with your GPUs, computed the way vLLM computes it."""

from .engine.estimate import Estimate, estimate
from .engine.vllm_versions import LATEST_VERSION, rules_for
from .engine.workload import Workload, WorkloadCapacity, workload_capacity
from .errors import (
    CalculatorError,
    GatedModel,
    HubUnreachable,
    InvalidConfig,
    InvalidInput,
    ModelNotFound,
    UnknownGpu,
    UnsupportedArchitecture,
    UnsupportedVllmVersion,
)
from .gpus import GpuSpec, custom_gpu, find_gpu, gpu_catalog
from .model.model_source import load_model_spec, model_spec_from_text, preset_ids
from .model.spec import ModelSpec
from .scenario import Scenario

__all__ = [
    "LATEST_VERSION",
    "CalculatorError",
    "Estimate",
    "GatedModel",
    "GpuSpec",
    "HubUnreachable",
    "InvalidConfig",
    "InvalidInput",
    "ModelNotFound",
    "ModelSpec",
    "Scenario",
    "UnknownGpu",
    "UnsupportedArchitecture",
    "UnsupportedVllmVersion",
    "Workload",
    "WorkloadCapacity",
    "custom_gpu",
    "estimate",
    "find_gpu",
    "gpu_catalog",
    "load_model_spec",
    "model_spec_from_text",
    "preset_ids",
    "rules_for",
    "workload_capacity",
]
