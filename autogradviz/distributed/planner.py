"""How many bytes one GPU holds for a training layout: arithmetic only, no torch.

Model states (Rajbhandari et al. 2019, "ZeRO", https://arxiv.org/abs/1910.02054): with
mixed-precision Adam each parameter costs 2 bytes of 16-bit weight, 2 of 16-bit gradient
and K = 12 of optimizer state (fp32 master weight, momentum, variance). Tensor (tp) and
pipeline (pp) parallelism split every layer's tensors, so each GPU starts from
``params / (tp * pp)``; ZeRO then shards over the data-parallel group:

    stage 0 (DDP)   every state replicated           (2 + 2 + K) P
    stage 1         optimizer states sharded          2P + 2P + K P / N
    stage 2         + gradients                       2P + (2 + K) P / N
    stage 3         + parameters                      (2 + 2 + K) P / N

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", https://arxiv.org/abs/2205.05198), bytes per transformer layer with
16-bit activations, 1-byte dropout masks, an MLP of width 4h and s x s attention scores:

    no parallelism                         s b h (34 + 5 a s / h)
    tensor parallel t                      s b h (10 + 24/t + 5 a s / (h t))
    tensor + sequence parallel             s b h / t (34 + 5 a s / h)
    + selective recompute                  s b h / t * 34   (no SP: s b h (10 + 24/t))
    full recompute (layer input only)      2 s b h / t      (no SP: 2 s b h)

Everything here is a plain number in bytes; `records.MemoryPlan` prints it as a table.
That table is in decimal GB (10^9 bytes), unlike the rest of the package, which prints
measured bytes with `records.format_bytes` in binary units: the figures this module
reproduces are stated in decimal GB by the papers above (ZeRO's 120 / 31.4 / 16.6 /
1.875 GB) and by GPU data sheets (an "80 GB" device holds 80e9 bytes, the default
``gpu_bytes``), so printing GiB would make every comparison with them look wrong by 7%.
"""
from __future__ import annotations

from .records import (
    PLAN_SCHEDULES, RECOMPUTE_POLICIES, MemoryPlan, ModelStateBytes, PlanSchedule, Recompute,
)

__all__ = ["activation_bytes_per_layer", "model_state_bytes", "plan_memory",
           "ring_all_reduce_traffic"]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _non_negative(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def ring_all_reduce_traffic(nbytes: float, world: int) -> tuple[float, int]:
    """What one rank sends in a ring all-reduce of ``nbytes`` over ``world`` ranks:
    ``(bytes, messages)``. A reduce-scatter then an all-gather, each ``world - 1``
    sequential steps that send one ``nbytes / world`` chunk (Patarasuk and Yuan 2009,
    https://doi.org/10.1016/j.jpdc.2008.09.002)."""
    world = _positive_int("world", world)
    steps = 2 * (world - 1)
    return steps * _non_negative("nbytes", nbytes) / world, steps


def model_state_bytes(params: int, *, dp: int = 1, zero: int = 0, tp: int = 1, pp: int = 1,
                      bytes_param: float = 2, bytes_grad: float = 2,
                      bytes_optimizer: float = 12) -> ModelStateBytes:
    """Weights, gradients and optimizer states held by one GPU, in bytes.

    ``tp * pp`` shard every state first; ZeRO ``zero`` (0-3) then shards over ``dp``:
    1 the optimizer states, 2 also the gradients, 3 also the parameters. The defaults are
    mixed-precision Adam (2 + 2 + 12 bytes per parameter). The ZeRO paper's Figure 1,
    7.5B parameters on 64 GPUs, is ``model_state_bytes(7_500_000_000, dp=64, zero=z)``:
    120, 31.4, 16.6 and 1.875 GB for z = 0..3.
    """
    if isinstance(params, bool) or not isinstance(params, (int, float)) or params <= 0:
        raise ValueError(f"params must be a positive parameter count, got {params!r}")
    dp, tp, pp = (_positive_int(n, v) for n, v in (("dp", dp), ("tp", tp), ("pp", pp)))
    if zero not in (0, 1, 2, 3) or isinstance(zero, bool):
        raise ValueError(f"zero must be a ZeRO stage 0, 1, 2 or 3 (0 = plain DDP), got {zero!r}")
    per_model_rank = params / (tp * pp)
    p = _non_negative("bytes_param", bytes_param) * per_model_rank
    g = _non_negative("bytes_grad", bytes_grad) * per_model_rank
    o = _non_negative("bytes_optimizer", bytes_optimizer) * per_model_rank
    return ModelStateBytes(params=p / dp if zero >= 3 else p,
                           grads=g / dp if zero >= 2 else g,
                           optimizer=o / dp if zero >= 1 else o)


def activation_bytes_per_layer(seq_len: int, micro_batch: int, hidden: int, heads: int, *,
                               tp: int = 1, sequence_parallel: bool = False,
                               recompute: Recompute = "none", cp: int = 1) -> float:
    """Bytes one transformer layer keeps for backward on one GPU, for one microbatch
    (Korthikanti et al. 2022; the module docstring lists the cases).

    ``cp`` (context parallelism) gives each GPU ``seq_len / cp`` tokens; it is accepted only
    with ``recompute`` "selective" or "full", where no s x s score matrix is stored
    (blockwise attention, as ring attention and FlashAttention compute it).
    """
    s, b, h, a = (_positive_int(n, v) for n, v in (("seq_len", seq_len),
                                                    ("micro_batch", micro_batch),
                                                    ("hidden", hidden), ("heads", heads)))
    t, cp = _positive_int("tp", tp), _positive_int("cp", cp)
    if recompute not in RECOMPUTE_POLICIES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_POLICIES}, got {recompute!r}")
    if h % a:
        raise ValueError(f"heads ({a}) must divide hidden ({h})")
    if a % t:
        raise ValueError(f"tp ({t}) must divide heads ({a}): each GPU holds whole heads")
    if cp > 1 and recompute == "none":
        raise ValueError("cp > 1 assumes blockwise attention that stores no s x s scores: "
                         "pass recompute='selective' (or 'full')")
    if s % cp:
        raise ValueError(f"cp ({cp}) must divide seq_len ({s})")
    s //= cp
    sbh = float(s * b * h)
    if recompute == "full":
        return 2 * sbh / t if sequence_parallel else 2 * sbh
    attention_core = 0.0 if recompute == "selective" else 5 * a * s / h
    if sequence_parallel:
        return sbh / t * (34 + attention_core)
    return sbh * (10 + 24 / t + attention_core / t)


def plan_memory(params: float, *, layers: int, hidden: int, heads: int, seq_len: int,
                world: int | None = None, dp: int = 1, tp: int = 1, pp: int = 1, cp: int = 1,
                zero: int = 1, micro_batch: int = 1, microbatches: int = 1,
                schedule: PlanSchedule = "1f1b", recompute: Recompute = "none",
                sequence_parallel: bool = False, gpu_bytes: float = 80e9,
                margin: float = 0.1, bytes_param: float = 2, bytes_grad: float = 2,
                bytes_optimizer: float = 12) -> MemoryPlan:
    """The bytes one GPU holds to train a dense transformer with this layout.

    ``world`` (if given) must equal ``dp * cp * tp * pp``. ZeRO shards over the
    ``dp * cp`` GPUs that hold the same weights. The first pipeline stage holds its
    ``layers / pp`` layers' activations for ``min(pp, microbatches)`` microbatches under
    1F1B and for all ``microbatches`` under GPipe; under full recompute, one layer's
    complete activations come on top (backward rebuilds them). ``fits`` compares the total with
    ``gpu_bytes * (1 - margin)``; the margin stands for what is not counted (embeddings
    and logits, communication buffers, the CUDA context, fragmentation).
    """
    dp, tp, pp, cp, layers, micro_batch, microbatches = (
        _positive_int(n, v) for n, v in (("dp", dp), ("tp", tp), ("pp", pp), ("cp", cp),
                                         ("layers", layers), ("micro_batch", micro_batch),
                                         ("microbatches", microbatches)))
    if world is not None and _positive_int("world", world) != dp * cp * tp * pp:
        raise ValueError(f"dp ({dp}) * cp ({cp}) * tp ({tp}) * pp ({pp}) = "
                         f"{dp * cp * tp * pp} != world ({world}): the sizes must multiply "
                         "to the number of GPUs")
    if layers % pp:
        raise ValueError(f"pp ({pp}) must divide layers ({layers}) so every stage holds "
                         "the same number of layers")
    if schedule not in PLAN_SCHEDULES:
        raise ValueError(f"schedule must be one of {PLAN_SCHEDULES}, got {schedule!r}")
    if sequence_parallel and tp == 1:
        raise ValueError("sequence_parallel splits activations over the tensor-parallel "
                         "group: it needs tp > 1")
    margin = _non_negative("margin", margin)
    if margin >= 1:
        raise ValueError(f"margin is a fraction of the device in [0, 1), got {margin!r}")
    per_layer = activation_bytes_per_layer(seq_len, micro_batch, hidden, heads, tp=tp,
                                           sequence_parallel=sequence_parallel,
                                           recompute=recompute, cp=cp)
    states = model_state_bytes(params, dp=dp * cp, zero=zero, tp=tp, pp=pp,
                               bytes_param=bytes_param, bytes_grad=bytes_grad,
                               bytes_optimizer=bytes_optimizer)
    in_flight = microbatches if schedule == "gpipe" else min(pp, microbatches)
    # Full recompute reruns one layer at a time in backward, with all of its activations
    # (blockwise attention, without the s x s scores, when the sequence is split over cp).
    working = 0.0
    if recompute == "full":
        working = activation_bytes_per_layer(
            seq_len, micro_batch, hidden, heads, tp=tp, sequence_parallel=sequence_parallel,
            recompute="selective" if cp > 1 else "none", cp=cp)
    return MemoryPlan(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero, params=float(params),
                      layers=layers, hidden=hidden, heads=heads, seq_len=seq_len,
                      micro_batch=micro_batch, microbatches=microbatches, schedule=schedule,
                      recompute=recompute, sequence_parallel=sequence_parallel,
                      states=states, activation_per_layer=per_layer,
                      layers_per_stage=layers // pp, in_flight=in_flight,
                      gpu_bytes=_non_negative("gpu_bytes", gpu_bytes), margin=margin,
                      recompute_bytes=working)
