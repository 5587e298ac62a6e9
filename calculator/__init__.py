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
from .speed.plan import CapacityPlan, Slo, capacity_plan, slo_violations
from .speed.predict import SpeedEstimate, speed_estimate
from .speed.prices import GpuPrice, gpu_price, price_table
from .speed.recommend import Deployment, Option, Recommendations, recommend
from .speed.summary import recommendations_summary, speed_summary
from .speed.sweep import ConcurrencySweep, concurrency_sweep
from .speed.traffic import Traffic

__all__ = [
    "LATEST_VERSION",
    "CalculatorError",
    "CapacityPlan",
    "ConcurrencySweep",
    "Deployment",
    "Estimate",
    "GatedModel",
    "GpuPrice",
    "GpuSpec",
    "HubUnreachable",
    "InvalidConfig",
    "InvalidInput",
    "ModelNotFound",
    "ModelSpec",
    "Option",
    "Recommendations",
    "Scenario",
    "Slo",
    "SpeedEstimate",
    "Traffic",
    "UnknownGpu",
    "UnsupportedArchitecture",
    "UnsupportedVllmVersion",
    "Workload",
    "WorkloadCapacity",
    "capacity_plan",
    "concurrency_sweep",
    "custom_gpu",
    "estimate",
    "find_gpu",
    "gpu_catalog",
    "gpu_price",
    "load_model_spec",
    "model_spec_from_text",
    "preset_ids",
    "price_table",
    "recommend",
    "recommendations_summary",
    "rules_for",
    "slo_violations",
    "speed_estimate",
    "speed_summary",
    "workload_capacity",
]
