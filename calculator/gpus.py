"""The GPU catalog: usable memory, bandwidth and BF16 compute for the accelerators vLLM runs on.

The data lives in ``calculator/data/gpus.json`` (one ``source`` note per entry); this module validates it
once and looks names up the way people type them: ``find_gpu("NVIDIA H100 80GB HBM3")``,
``find_gpu("h100")`` and ``find_gpu("H100_SXM")`` all give the same ``GpuSpec``.
"""

from __future__ import annotations

import difflib
from collections import Counter
import json
import math
import re
from functools import cache, lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, computed_field

from calculator.errors import InvalidInput, UnknownGpu
from calculator.units import gib_to_bytes

__all__ = ["GpuFamily", "GpuSpec", "Interconnect", "MemoryArchitecture", "custom_gpu", "find_gpu", "gpu_catalog"]

# NOTE: "blackwell" is the data-centre part (sm_100/sm_103: B200, B300); the GeForce RTX 50 and RTX PRO
# cards are sm_120 ("blackwell-rtx"), which vLLM treats differently (e.g. no FlashMLA or CUTLASS MLA).
GpuFamily = Literal[
    "volta", "turing", "ampere", "ada", "hopper", "blackwell", "blackwell-rtx", "cdna2", "cdna3", "cdna4",
]

# NOTE: "integrated": one memory pool shared with the host (cudaDeviceProp.integrated: GB10, Jetson); vLLM takes the
# free memory from psutil's MemAvailable (vllm/utils/mem_utils.py, ``is_integrated_gpu``), so the host's own use counts.
# "coherent": the GPU's HBM is its own but reachable by the CPU over NVLink-C2C (GH200, driver-managed HBM); vLLM
# sizes from the HBM that cudaMemGetInfo reports. "coherent-numa": the same GH200 with its HBM onlined by the OS as a
# NUMA node (NUMA or "unified" mode), where vLLM's free memory depends on the version
# (``calculator.engine.free_memory``).
MemoryArchitecture = Literal["discrete", "coherent", "coherent-numa", "integrated"]

# How the GPUs of one server reach each other, which decides NCCL's transport and buffers and whether vLLM's custom
# all-reduce runs (``calculator.engine.interconnect``): "nvswitch" every GPU on NVLink through switches (HGX/DGX),
# "nvlink" NVLink bridges or a switchless mesh (H100 NVL pairs, V100 SXM2 cube mesh, bridged A6000s), "pcie" PCIe
# only, "xgmi" AMD Infinity Fabric (MI300X platforms: every GPU linked to every other).
Interconnect = Literal["nvswitch", "nvlink", "pcie", "xgmi"]

MAX_GPU_MEMORY_GIB = 10_000.0  # far above any accelerator; catches MiB or bytes typed as GiB
MIN_GPU_MEMORY_GIB = 0.25  # the least the engine plans for (below it not even a CUDA context fits)
CATALOG_FILE = "gpus.json"
_SUGGESTIONS = 3
# NOTE: words that name a vendor or a product line but not the GPU, dropped before matching so
# "nvidia l4", "Tesla T4" and "AMD Instinct MI300X" find "L4", "T4" and "MI300X".
_BRAND_WORDS = frozenset({"nvidia", "amd", "geforce", "tesla", "instinct"})


class GpuSpec(BaseModel):
    """One accelerator as vLLM sees it: one device, the memory the driver reports, and its peak rates."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)  # display name, e.g. "H100 SXM 80GB"
    key: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")  # slug, e.g. "h100-sxm-80gb"
    vendor: Literal["nvidia", "amd"] | None  # None for a custom GPU
    platform: Literal["cuda", "rocm"]
    family: GpuFamily | None  # None for a custom GPU
    compute_capability: tuple[int, int] | None  # CUDA (major, minor); None on ROCm and for a custom GPU
    # streaming multiprocessors (cudaDevAttrMultiProcessorCount); None on ROCm, for a custom GPU and where unknown
    sm_count: int | None = Field(None, ge=1)
    marketed_memory_gb: int | None = Field(ge=1)  # the number on the box, e.g. 80
    memory_gib: float = Field(gt=0, lt=MAX_GPU_MEMORY_GIB)  # usable: torch.cuda.mem_get_info() total
    memory_bandwidth_gb_s: float | None = Field(gt=0)  # None when unknown (custom GPU)
    bf16_dense_tflops: float | None = Field(gt=0)  # without sparsity; FP16 below compute capability 8.0
    # Speed model inputs (calculator.speed); None where the GPU has no such tensor path or it is unknown.
    fp8_dense_tflops: float | None = Field(None, gt=0)  # FP8 tensor cores (Ada, Hopper, Blackwell, CDNA3+)
    int8_dense_tops: float | None = Field(None, gt=0)  # INT8 tensor cores (W8A8 int8)
    fp4_dense_tflops: float | None = Field(None, gt=0)  # FP4 tensor cores (NVFP4/MXFP4 on Blackwell, CDNA4)
    # NOTE: the best dense matmul rate measured on the card (e.g. Stas Bekman's MAMF finder), which the datasheet's
    # peak is not: datacenter parts drop their clock under dense tensor load (H100 SXM 794.5 of 989.5, MI300X 668
    # of 1,307), GeForce parts hold clocks above the rated boost their datasheet assumes (RTX 5090 238 of 209.5)
    measured_bf16_tflops: float | None = Field(None, gt=0)
    measured_fp8_tflops: float | None = Field(None, gt=0)
    measured_compute_source: str | None = None  # who measured them, how, with which software
    # NOTE: vLLM's linear layers timed on the card (benchmarks/linear_layer_rates.py): the rate its decode GEMMs (a
    # few rows each) stream weights at, 0.79-0.89 of the datasheet's bandwidth; and its FP8 and NVFP4 GEMMs' rates
    # over its BF16 ones' at prefill shapes (FP8 1.15-1.74, FP4 2.13-2.86), which the best FP8 matmul's over the best
    # BF16 one's (~1.8) and the datasheet's FP4 over BF16 (4-6x) overstate
    measured_bandwidth_gb_s: float | None = Field(None, gt=0)
    measured_fp8_speedup: float | None = Field(None, gt=0)
    measured_fp4_speedup: float | None = Field(None, gt=0)
    measured_linear_source: str | None = None
    # key of a timed card of the same chip whose FP8 and FP4 speedups this one takes: vLLM runs the same kernels on
    # both, and this card's own were not timed (the RTX 5090 from the RTX PRO 6000 Blackwell, both GB202)
    speedups_timed_on: str | None = None
    interconnect: str | None = None  # how TP ranks talk: "NVLink 4", "PCIe 4.0 x16", "Infinity Fabric (xGMI)"
    interconnect_gb_s: float | None = Field(None, gt=0)  # per GPU, each direction
    # the topologies the card is sold in, the usual one first (a PCIe card that takes an NVLink bridge has two)
    topologies: tuple[Interconnect, ...] = ("pcie",)
    # how many of it one server holds: the most GPUs a one-node layout (TP x DP) can use; a DGX Spark box has one
    gpus_per_node: int = Field(8, ge=1, le=64)
    speed_source: str | None = None  # where the speed fields come from
    aliases: tuple[str, ...] = ()  # exact nvidia-smi / torch names first, then short forms
    memory_architecture: MemoryArchitecture = "discrete"
    # the host pool MemAvailable describes where vLLM reads free memory from the host (LPDDR5X + HBM in NUMA mode)
    system_memory_gib: float | None = Field(None, gt=0, lt=MAX_GPU_MEMORY_GIB)
    variant_of: str | None = None  # key of the same hardware in its default memory mode (shares its price)
    source: str = Field(min_length=1)

    def __hash__(self) -> int:  # cheap and consistent with __eq__ (see VersionRules.__hash__)
        return hash((self.key, self.memory_gib))

    def with_rates(self, **rates: float) -> GpuSpec:
        """This GPU with the datasheet rates given in place of the catalog's; a compute rate or a bandwidth given drops
        the measured ceilings or streaming rate too (they were measured on the catalog's card, not on the one whose
        rates are given)."""
        if not rates:
            return self
        if {"bf16_dense_tflops", "fp8_dense_tflops"} & rates.keys():
            rates = {**rates, "measured_bf16_tflops": None, "measured_fp8_tflops": None,
                     "measured_compute_source": None, "measured_fp8_speedup": None, "measured_fp4_speedup": None,
                     "speedups_timed_on": None}
        if "memory_bandwidth_gb_s" in rates:
            rates = {**rates, "measured_bandwidth_gb_s": None}
        return self.model_copy(update=rates)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def memory_bytes(self) -> int:
        """Usable memory in bytes, rounded down like the driver's integer counts."""
        return gib_to_bytes(self.memory_gib)


@cache
def gpu_catalog() -> tuple[GpuSpec, ...]:
    """Every catalog GPU, validated, in file order (loaded once from package data)."""
    text = (resources.files("calculator") / "data" / CATALOG_FILE).read_text(encoding="utf-8")
    return TypeAdapter(tuple[GpuSpec, ...]).validate_python(json.loads(text)["gpus"])


def find_gpu(name: str) -> GpuSpec:
    """The catalog GPU called ``name``: its key, display name or any alias.

    Case, spaces, underscores, hyphens and brand words (NVIDIA, GeForce, Tesla, AMD Instinct) are ignored,
    so ``find_gpu("a100_80gb")`` is the A100 SXM 80GB. Raises ``UnknownGpu`` listing close matches.
    """
    wanted = _normalized(name)
    index = _name_index()
    if wanted in index:
        return index[wanted]
    raise UnknownGpu(_unknown_gpu_message(name, wanted, index))


def custom_gpu(memory_gib: float, name: str = "Custom GPU", *, memory_bandwidth_gb_s: float | None = None,
               bf16_dense_tflops: float | None = None, fp8_dense_tflops: float | None = None,
               interconnect_gb_s: float | None = None) -> GpuSpec:
    """A GPU the catalog lacks, known by the memory the driver reports (``--gpu-memory-gib``) and, for the speed
    model, optionally its HBM bandwidth, dense TFLOPS and interconnect bandwidth (per direction)."""
    if isinstance(memory_gib, bool) or not (isinstance(memory_gib, (int, float)) and math.isfinite(memory_gib)):
        raise InvalidInput(f"GPU memory must be a number of GiB, got {memory_gib!r}")
    rates = {"memory bandwidth (GB/s)": memory_bandwidth_gb_s, "BF16 TFLOPS": bf16_dense_tflops,
             "FP8 TFLOPS": fp8_dense_tflops, "interconnect bandwidth (GB/s)": interconnect_gb_s}
    for label, rate in rates.items():
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                                 or not math.isfinite(rate) or rate <= 0):
            raise InvalidInput(f"custom GPU {label} must be a positive number, got {rate!r}")
    if not 0 < memory_gib < MAX_GPU_MEMORY_GIB:
        raise InvalidInput(
            f"GPU memory must be above 0 and below {MAX_GPU_MEMORY_GIB:,.0f} GiB, got {memory_gib} "
            "(give the total nvidia-smi or vLLM reports, in GiB)"
        )
    return GpuSpec(
        name=name.strip() or "Custom GPU",
        key="custom",
        vendor=None,
        platform="cuda",
        family=None,
        compute_capability=None,
        marketed_memory_gb=None,
        memory_gib=float(memory_gib),
        memory_bandwidth_gb_s=memory_bandwidth_gb_s,
        bf16_dense_tflops=bf16_dense_tflops,
        fp8_dense_tflops=fp8_dense_tflops,
        interconnect_gb_s=interconnect_gb_s,
        speed_source="given by the user" if memory_bandwidth_gb_s else None,
        source="memory given by the user" + ("" if memory_bandwidth_gb_s else "; bandwidth and compute unknown"),
    )


@lru_cache(maxsize=1024)  # NOTE: every estimate looks its GPU up by name; a few names are ever typed
def _normalized(name: str) -> str:
    words = re.findall(r"[a-z0-9]+", name.lower())
    return "".join(word for word in words if word not in _BRAND_WORDS)


@cache
def _name_index() -> dict[str, GpuSpec]:
    index: dict[str, GpuSpec] = {}
    for gpu in gpu_catalog():
        for spelling in (gpu.key, gpu.name, *gpu.aliases):
            normalized = _normalized(spelling)
            holder = index.setdefault(normalized, gpu)
            if holder.key != gpu.key:
                # NOTE: a data error, not a user error; the catalog test catches it first.
                raise ValueError(f"{spelling!r} names both {holder.key} and {gpu.key} in {CATALOG_FILE}")
    return index


_ASKED_MEMORY = re.compile(r"(\d+)\s*gi?b", re.IGNORECASE)
_CHIP = re.compile(r"[a-z]+\d+")  # "h100" of "h100sxm"
_SAME_CHIP_BONUS = 0.3
_MEMORY_WEIGHT = 0.5  # how much a memory gap (as a fraction of the larger) counts against name similarity


def _without_memory(spelling: str, memory_gb: int | None) -> str:
    """A catalog spelling less its trailing memory ("h100nvl94gb" -> "h100nvl")."""
    for suffix in (f"{memory_gb}gb", f"{memory_gb}g") if memory_gb else ():
        if spelling.endswith(suffix) and len(spelling) > len(suffix):
            return spelling[: -len(suffix)]
    return spelling


def _unknown_gpu_message(name: str, wanted: str, index: dict[str, GpuSpec]) -> str:
    # NOTE: ranked by name similarity less the gap to the memory the name asks for, so "h100-sxm-96gb" suggests the
    # H100 NVL 94GB before the H100 SXM 80GB, and never a 16 GB V100 ahead of either.
    asked = _ASKED_MEMORY.search(name)
    memory = int(asked.group(1)) if asked else None
    chip = _normalized(_ASKED_MEMORY.sub("", name)) or wanted  # the memory is weighed on its own, not as digits
    best: dict[str, tuple[float, float]] = {}
    for spelling, gpu in index.items():
        bare = _without_memory(spelling, gpu.marketed_memory_gb)
        score = difflib.SequenceMatcher(None, chip, bare).ratio()
        if (family := _CHIP.match(chip)) and spelling.startswith(family.group()):
            score += _SAME_CHIP_BONUS  # an H100 of another form factor before an A100 of the same one
        if score < 0.5:
            continue
        if memory and gpu.marketed_memory_gb:
            score -= _MEMORY_WEIGHT * abs(gpu.marketed_memory_gb - memory) / max(gpu.marketed_memory_gb, memory)
        # the letters in common break ties, so a transposition ("4900") finds its GPU ("4090") first
        shared = sum((Counter(chip) & Counter(bare)).values()) / max(len(chip), len(bare))
        best[gpu.name] = max(best.get(gpu.name, (-1.0, 0.0)), (score, shared))
    suggestions = sorted(best, key=lambda gpu_name: best[gpu_name], reverse=True)[:_SUGGESTIONS]
    hint = f" Did you mean {', '.join(suggestions)}?" if suggestions else ""
    return (
        f"Unknown GPU {name!r}.{hint} The catalog has {len(gpu_catalog())} GPUs; for any other, give its "
        "memory with --gpu-memory-gib (custom memory is always allowed)."
    )
