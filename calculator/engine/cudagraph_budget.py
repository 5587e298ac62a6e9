"""Whether vLLM takes its CUDA-graph estimate out of the KV-cache budget: per version, platform and model runner.

From 0.18 ``Worker.determine_available_memory`` (``vllm/v1/worker/gpu_worker.py``) asks the model runner for
``profile_cudagraph_memory()`` and subtracts it when ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is on::

    available = requested - non_kv_cache_memory - cudagraph_memory_estimate_applied

What decides the applied estimate, read from every minor wheel 0.17-0.34:

* the environment variable's default (``vllm/envs.py``): "0" in 0.18-0.19, "1" from 0.20;
* the graphs: no estimate with ``cudagraph_mode`` NONE (``--enforce-eager``);
* the platform: CUDA only in 0.20-0.25 (``is_cuda()``; 0.20 ``not is_rocm()``), ROCm too from 0.26
  (``is_cuda_alike()``);
* the model runner: Model Runner V2's ``GPUModelRunner.profile_cudagraph_memory``
  (``vllm/v1/worker/gpu/model_runner.py``) is ``return 0`` up to 0.28 and measures from 0.29. V2 is the default
  for some models from 0.22 (``VllmConfig.use_v2_model_runner`` and ``_is_default_v2_model_runner_model`` in
  ``vllm/config/vllm.py``): 0.22 Qwen3ForCausalLM, 0.23 also Llama/Mistral (dense, unquantized, no Mamba
  state), 0.24 the same three plus DeepseekV2, Qwen2Moe, GraniteMoe; 0.25-0.28 every generative model that is
  neither MoE (unless listed) nor hybrid (Mamba / linear attention; 0.27+ a listed hybrid too). DSpark
  speculative decoding forces V2 (0.25+).
* 0.34 with the extensible KV cache measures the real graphs after capture instead (``memory.py``).

So a dense Llama on 0.26 (Model Runner V2) keeps its graphs in the ``(1 - util)`` headroom, as
``file-b300-dsv4-flash-0731-v0260-dspark`` (V2 forced by DSpark) shows: 246.27 - 156.32 - 2.99 - 0.23 = 86.73 GiB of
KV with 3.06 GiB of graphs outside. ``file-gb10-qwen38-27b-786k-v0271`` (a hybrid: Model Runner V1) does subtract
its 1.94 GiB estimate: from 0.27 the worker reports it inside "peak activation"
(``peak_activation_memory = transient_peak_headroom + cudagraph_memory_estimate_applied``), so the printed
3.78 GiB is 1.84 of activations plus the estimate (as in 0.18-0.19; 0.20-0.26 print the activations alone).
"""

from __future__ import annotations

from ..model.spec import ModelSpec, QuantizationSpec
from .vllm_versions import Device, VersionRules

# vllm/config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, per first version (additions only; 0.25 dropped the dense
# names because every non-MoE model became a V2 default).
_V2_ARCHITECTURES_0_22 = frozenset({"Qwen3ForCausalLM"})
_V2_ARCHITECTURES_0_23 = _V2_ARCHITECTURES_0_22 | {"LlamaForCausalLM", "MistralForCausalLM"}
_V2_ARCHITECTURES_0_24 = _V2_ARCHITECTURES_0_23 | {"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM",
                                                  "GraniteMoeForCausalLM"}
_V2_MOE_ARCHITECTURES_0_25 = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})
_V2_MOE_ARCHITECTURES_0_26 = _V2_MOE_ARCHITECTURES_0_25 | {"InklingForCausalLM", "InklingForConditionalGeneration",
                                                          "LongcatFlashNgramForCausalLM"}
_V2_MOE_ARCHITECTURES_0_27 = _V2_MOE_ARCHITECTURES_0_26 | {"KimiK3ForConditionalGeneration"}
_V2_MOE_ARCHITECTURES_0_28 = _V2_MOE_ARCHITECTURES_0_27 | {"DeepseekV4ForCausalLM"}


def uses_model_runner_v2(rules: VersionRules, spec: ModelSpec, quantization: QuantizationSpec | None) -> bool:
    """Whether vLLM picks Model Runner V2 for this model by default (``VLLM_USE_V2_MODEL_RUNNER`` unset)."""
    version, architecture = rules.version, spec.architecture
    is_moe, is_hybrid = spec.moe is not None, any(layer.kind == "mamba" for layer in spec.layers)
    if rules.engine != "v1" or not version.at_least(22):
        return False
    if not version.at_least(24):
        listed = _V2_ARCHITECTURES_0_23 if version.at_least(23) else _V2_ARCHITECTURES_0_22
        return architecture in listed and not is_moe and quantization is None and not is_hybrid
    if not version.at_least(25):
        return architecture in _V2_ARCHITECTURES_0_24 and not is_hybrid
    listed = (_V2_MOE_ARCHITECTURES_0_28 if version.at_least(28) else _V2_MOE_ARCHITECTURES_0_27
              if version.at_least(27) else _V2_MOE_ARCHITECTURES_0_26 if version.at_least(26)
              else _V2_MOE_ARCHITECTURES_0_25)
    if is_hybrid and not (version.at_least(27) and architecture in listed):
        return False
    return architecture in listed or not is_moe


def subtracts_cudagraph_estimate(rules: VersionRules, spec: ModelSpec, quantization: QuantizationSpec | None, *,
                                 device: Device, enforce_eager: bool) -> tuple[bool, str]:
    """Whether the estimate comes out of the KV budget, and why (one line for the page)."""
    version = rules.version
    if device == "cpu":
        return False, "no CUDA graphs on the CPU backend"
    if enforce_eager:
        return False, "--enforce-eager: no CUDA graphs are captured"
    if not version.at_least(18):
        return False, "captured after the KV cache, in the (1 - util) headroom (vLLM < 0.18 does not estimate them)"
    if not rules.subtracts_cudagraph_estimate:
        return False, ("estimated but not applied: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 0 before "
                       "0.20; the graphs use the (1 - util) headroom")
    if device == "rocm" and not version.at_least(26):
        return False, "not estimated on ROCm before 0.26; the graphs use the (1 - util) headroom"
    if not version.at_least(29) and uses_model_runner_v2(rules, spec, quantization):
        return False, (f"Model Runner V2 (vLLM {version}'s default for {spec.architecture}) estimates 0 before "
                       "0.29; the graphs use the (1 - util) headroom")
    return True, "estimated during profiling and subtracted from the KV budget (vLLM 0.20+)"
