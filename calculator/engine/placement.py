"""Where the weights live beyond TP/PP: data and expert parallelism for MoE experts, and CPU offload.

Read from vLLM 0.32's source:

* ``FusedMoEParallelConfig.make`` (model_executor/layers/fused_moe/config.py): with ``--data-parallel-size`` > 1
  the MoE layers are tensor-parallel across all tp x dp devices ("flatten TP across DP"), even without expert
  parallelism; with ``--enable-expert-parallel`` each of those devices instead owns whole experts
  (``ep_size = tp x dp``, ``tp_size = 1`` for the experts), the first ``E % ep_size`` ranks one more
  (``expert_map_manager.determine_expert_map``). Attention and dense layers stay split by TP alone.
* ``UVAOffloader._maybe_offload_to_cpu`` (model_executor/offloader/uva.py): ``--cpu-offload-gb`` moves
  decoder-layer parameters to pinned CPU memory one parameter at a time, from the first layer on, until the
  offloaded total reaches the limit (the last parameter may overshoot it). Embeddings and the LM head stay.
* ``--all2all-backend moonep`` (0.32 and 0.34 ``fused_moe/oracle/unquantized.py``
  ``convert_to_unquantized_kernel_format`` -> ``prepare_finalize/moonep.py`` ``gather_moonep_weight_layout``): vLLM's
  MoonEP proof of concept all-gathers every rank's experts at load time into one ``[E + 4, ...]`` bf16 layout per
  projection (gate, up, down; 4 = ``MOONEP_DEFAULT_NUM_PREFETCH_SLOTS``, zeroed), which replaces the layer's own
  weights: every rank holds all experts plus 4 slots, where the all-to-all kernels run (EP, DP > 1).
"""

from __future__ import annotations

from functools import lru_cache

from ..model.quantization import QuantizationSpec
from ..model.spec import ModelSpec, WeightTensor
from ..model.weights import _tensor_cost
from .expert_parallel import MOONEP_PREFETCH_SLOTS, uses_all2all
from .kv_cache import pp_layer_ranges


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@lru_cache(maxsize=256)
def experts_placed(spec: ModelSpec, *, tensor_parallel_size: int, data_parallel_size: int,
                   enable_expert_parallel: bool, all2all_backend: str | None = None,
                   num_redundant_experts: int = 0) -> ModelSpec:
    """``spec`` with its expert tensors reshaped so that the TP split of ``weights.py`` gives each rank
    what vLLM places there under DP/EP (unchanged for dense models or a single engine without EP).

    ``num_redundant_experts``: EPLB's extra physical experts (``eplb.py``), spread over the EP ranks with the rest."""
    tp, dp = tensor_parallel_size, data_parallel_size
    expert_parallel = enable_expert_parallel and tp * dp > 1
    if spec.moe is None or (dp == 1 and not expert_parallel):
        return spec
    replicated = all2all_backend == "moonep" and uses_all2all(spec, data_parallel_size=dp,
                                                              enable_expert_parallel=enable_expert_parallel)
    placed: list[WeightTensor] = []
    for tensor in spec.weights:
        if tensor.role != "expert":
            placed.append(tensor)
        elif replicated:
            placed.append(tensor.model_copy(update={"count": tensor.count + MOONEP_PREFETCH_SLOTS,
                                                    "tp": "replicated"}))
        elif expert_parallel:
            # NOTE: whole experts; the busiest rank holds ceil((E + R) / ep_size) of them, none TP-split (EPLB's R
            # redundant experts are physical copies: FusedMoE's global_num_experts = E + R, determine_expert_counts).
            count = _cdiv(tensor.count + num_redundant_experts, tp * dp)
            placed.append(tensor.model_copy(update={"count": count, "tp": "replicated"}))
        else:
            # NOTE: ceil(ceil(n / dp) / tp) == ceil(n / (dp x tp)): pre-split by dp, weights.py splits by tp.
            shape = list(tensor.shape)
            axis = 0 if tensor.tp in ("column", "expert") else -1 if tensor.tp == "row" else None
            if axis is not None:
                shape[axis] = _cdiv(shape[axis], dp)
            placed.append(tensor.model_copy(update={"shape": tuple(shape)}))
    return spec.model_copy(update={"weights": tuple(placed)})


def cpu_offloaded_bytes(spec: ModelSpec, *, dtype_bytes: int, tensor_parallel_size: int,
                        pipeline_parallel_size: int, quantization: QuantizationSpec | None,
                        cpu_offload_bytes: int) -> tuple[int, ...]:
    """Per pipeline stage: weight bytes each GPU of the stage keeps in CPU memory under ``--cpu-offload-gb``."""
    stages = pp_layer_ranges(spec.num_hidden_layers, pipeline_parallel_size)
    if cpu_offload_bytes <= 0:
        return tuple(0 for _ in stages)
    quant = quantization if quantization is not None else spec.quantization
    in_layers = sorted((t for t in spec.weights if t.loaded and t.placement == "layers" and t.layers is not None),
                       key=_registration_order)
    offloaded_per_stage = []
    for first, last in stages:
        offloaded = 0
        for layer in range(first, last):
            parameter, pending = None, 0
            for tensor in in_layers:
                low, high = tensor.layers  # type: ignore[misc]
                if not low <= layer < high:
                    continue
                name = _fused_name(tensor.name)
                if name != parameter:  # the previous vLLM parameter is complete: move it if under the limit
                    if offloaded < cpu_offload_bytes:
                        offloaded += pending
                    parameter, pending = name, 0
                cost = _tensor_cost(tensor, tensor_parallel_size, dtype_bytes, quant, spec.mla is not None)
                # NOTE: a stacked tensor (all experts of a layer) is one vLLM parameter, moved whole.
                pending += (cost.plain if layer in cost.excluded else cost.converted) * tensor.count
            if offloaded < cpu_offload_bytes:
                offloaded += pending
        offloaded_per_stage.append(offloaded)
    return tuple(offloaded_per_stage)


# vLLM fuses these checkpoint tensors into one parameter (QKVParallelLinear, MergedColumnParallelLinear, w13).
_FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
          "up_proj": "gate_up_proj", "w1": "w13", "w3": "w13"}


def _fused_name(name: str) -> str:
    parts = name.split(".")
    return ".".join(_FUSED.get(part, part) for part in parts)


def _registration_order(tensor: WeightTensor) -> int:
    """named_parameters() order inside a decoder layer: attention, then the MLP or MoE, then the layer norms."""
    if tensor.name.startswith("self_attn."):
        return 0
    return 2 if tensor.role == "norm" and "." not in tensor.name.removesuffix(".weight") else 1
