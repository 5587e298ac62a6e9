"""Small constructors for ``WeightTensor`` lists: a linear with its bias, a norm, a run of layers.

Names follow the checkpoint without the ``model.layers.{i}.`` prefix for per-layer tensors. Fused checkpoint
tensors (Phi-3 ``qkv_proj``, gpt-oss ``gate_up_proj``) are listed as their logical parts (``q_proj`` ...),
because vLLM shards each part on its own (e.g. KV heads are replicated when TP exceeds them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..spec import Placement, TpSharding, WeightRole, WeightTensor

Span = tuple[int, int]  # [first, last) decoder layers


def tensor(name: str, shape: tuple[int, ...], role: WeightRole, *, tp: TpSharding = "replicated",
           layers: Span | None = None, placement: Placement | None = None, count: int = 1,
           quantizable: bool = False, loaded: bool = True, dtype_bytes: float | None = None) -> WeightTensor:
    return WeightTensor(name=name, shape=shape, role=role, tp=tp,
                        placement=placement or ("layers" if layers is not None else "first"),
                        layers=layers, count=count, quantizable=quantizable, loaded=loaded, dtype_bytes=dtype_bytes)


def linear(prefix: str, out_shape: tuple[int, ...], in_features: int, role: WeightRole, *,
           tp: TpSharding, bias: bool = False, layers: Span | None = None, placement: Placement | None = None,
           count: int = 1, quantizable: bool = True, loaded: bool = True) -> list[WeightTensor]:
    """``prefix.weight`` shaped ``(*out_shape, in_features)`` and, with ``bias``, ``prefix.bias``.

    ``out_shape`` may be ``(heads, head_dim)`` so that column sharding splits whole heads.
    """
    # NOTE: a row-parallel layer keeps its whole bias on every rank (RowParallelLinear adds it after the reduce).
    bias_tp: TpSharding = "column" if tp == "column" else "replicated"
    tensors = [tensor(f"{prefix}.weight", (*out_shape, in_features), role, tp=tp, layers=layers,
                      placement=placement, count=count, quantizable=quantizable, loaded=loaded)]
    if bias:
        tensors.append(tensor(f"{prefix}.bias", out_shape, role, tp=bias_tp, layers=layers, placement=placement,
                              count=count, loaded=loaded))
    return tensors


def norm(prefix: str, size: int, *, bias: bool = False, layers: Span | None = None,
         placement: Placement | None = None, count: int = 1, role: WeightRole = "norm",
         loaded: bool = True) -> list[WeightTensor]:
    """A RMSNorm (``weight``) or a LayerNorm (``weight`` and ``bias``)."""
    names = ("weight", "bias") if bias else ("weight",)
    return [tensor(f"{prefix}.{part}", (size,), role, layers=layers, placement=placement, count=count,
                   loaded=loaded) for part in names]


def runs(indices: Iterable[int]) -> Iterator[Span]:
    """Consecutive runs of sorted layer indices: ``runs([0, 1, 2, 5, 6]) -> (0, 3), (5, 7)``."""
    start: int | None = None
    previous = -1
    for index in sorted(indices):
        if start is None:
            start = previous = index
        elif index == previous + 1:
            previous = index
        else:
            yield (start, previous + 1)
            start = previous = index
    if start is not None:
        yield (start, previous + 1)
