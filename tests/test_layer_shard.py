"""MegatronLayerShard (Chapter 10, Q49): torch's autograd and SDPA as the oracles, and
the bytes it saves against Korthikanti et al.'s formula (`activation_bytes_per_layer`)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import autogradviz as agv
from autogradviz.distributed.layer_shard import GatherLinear, MegatronLayerShard

S, B, H, A = 16, 2, 32, 4  # tokens, batch, hidden, heads


def _grads(model, x):
    out = model(x)
    out.square().sum().backward()
    return out.detach(), x.grad.clone(), {n: p.grad.clone() for n, p in
                                          model.named_parameters()}


def test_gather_linear_matches_autograd_of_the_gathered_linear():
    torch.manual_seed(0)
    block = torch.randn(4, B, 6, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda b, w, c: GatherLinear.apply(b, w, c, 3),
                                    (block, weight, bias))
    out = GatherLinear.apply(block, weight, bias, 3)
    ref = F.linear(block.repeat(3, 1, 1), weight, bias)
    assert out.shape == (12, B, 5) and torch.equal(out, ref)


def test_saves_only_the_rank_block_under_megatron_sp():
    torch.manual_seed(0)
    block = torch.randn(4, B, 6, requires_grad=True)
    layer = torch.nn.Linear(6, 5)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t,
                                                  lambda t: t):
        GatherLinear.apply(block, layer.weight, layer.bias, 3)
    assert saved == [block.shape, layer.weight.shape]  # not the (12, B, 6) gathered input


def test_one_rank_equals_a_layer_built_on_sdpa():
    torch.manual_seed(0)
    layer = MegatronLayerShard(H, A, p=0.0).double()
    x = torch.randn(S, B, H, dtype=torch.float64)
    qkv = layer.qkv(layer.ln1(x))
    q, k, v = (t.reshape(S, B, A, H // A).permute(1, 2, 0, 3) for t in qkv.chunk(3, -1))
    core = F.scaled_dot_product_attention(q, k, v)          # (B, A, S, d)
    x2 = x + layer.proj(core.permute(2, 0, 1, 3).reshape(S, B, H))
    ref = x2 + layer.fc2(F.gelu(layer.fc1(layer.ln2(x2))))
    torch.testing.assert_close(layer(x), ref)


def test_selective_recompute_gives_the_same_numbers():
    x = torch.randn(S, B, H)
    runs = []
    for selective in (False, True):
        torch.manual_seed(1)
        layer = MegatronLayerShard(H, A, tp=2, selective=selective, p=0.1)
        torch.manual_seed(2)  # the same dropout masks, recomputed ones included
        runs.append(_grads(layer, x.clone().requires_grad_()))
    (o1, g1, p1), (o2, g2, p2) = runs
    assert torch.equal(o1, o2) and torch.equal(g1, g2)
    for name in p1:
        torch.testing.assert_close(p1[name], p2[name])


def test_both_sequence_parallel_styles_compute_the_same():
    x = torch.randn(S // 2, B, H)
    runs = []
    for sp in ("megatron", "torch"):
        torch.manual_seed(1)
        layer = MegatronLayerShard(H, A, tp=2, sp=sp, p=0.0)
        runs.append(_grads(layer, x.clone().requires_grad_()))
    (o1, g1, p1), (o2, g2, p2) = runs
    torch.testing.assert_close(o1, o2)
    torch.testing.assert_close(g1, g2)
    for name in p1:
        torch.testing.assert_close(p1[name], p2[name])


@pytest.mark.parametrize("tp, selective, sp", [(1, False, None), (4, False, None),
                                               (4, True, None), (4, True, "megatron"),
                                               (4, True, "torch")])
def test_saved_bytes_match_the_formula(tp, selective, sp):
    """On `meta`, what torch saves is Korthikanti's count plus the LayerNorms' fp32
    mean and rstd (16 bytes per token), which the paper leaves out."""
    seq, hidden, heads = 64, 64, 8
    tokens_here = seq // tp if sp else seq
    tokens = torch.empty(tokens_here, B, hidden, dtype=torch.bfloat16, device="meta")
    mem = agv.estimate_memory(
        lambda: MegatronLayerShard(hidden, heads, tp, selective, sp).to(torch.bfloat16),
        tokens, optimizer=lambda params: torch.optim.AdamW(params))
    end_of_forward = [s for s in mem.samples if s.phase == "forward"][-1]
    measured = end_of_forward.bytes["activation"] + end_of_forward.bytes["input"]
    formula = agv.activation_bytes_per_layer(
        seq, B, hidden, heads, tp=tp, sequence_parallel=sp is not None,
        recompute="selective" if selective else "none")
    if sp == "torch":  # torch's SequenceParallel keeps two gathered 2sbh inputs whole
        formula += 4 * seq * B * hidden * (1 - 1 / tp)
    assert measured - formula == 16 * tokens_here * B


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="heads a multiple of tp"):
        MegatronLayerShard(32, 4, tp=3)
    with pytest.raises(ValueError, match="multiple of heads"):
        MegatronLayerShard(30, 4)
    with pytest.raises(ValueError, match="pass None"):
        MegatronLayerShard(32, 4, tp=2, sp="ring")


def test_tp_mlp_partials_sum_to_the_mlp_and_stay_local():
    from autogradviz.distributed.layer_shard import tp_mlp_partials

    torch.manual_seed(0)
    x, A, B = torch.randn(3, 4), torch.randn(4, 8), torch.randn(8, 4)
    for t in (1, 2, 4):
        parts, reduces = tp_mlp_partials(x, A, B, t)
        assert len(parts) == t and reduces == (t > 1)
        torch.testing.assert_close(sum(parts), F.gelu(x @ A) @ B)
    # rank 0 of 2 reads only A's first column block and B's first row block
    A2, B2 = A.clone(), B.clone()
    A2[:, 4:], B2[4:] = 7.0, 7.0
    torch.testing.assert_close(tp_mlp_partials(x, A2, B2, 2)[0][0],
                               tp_mlp_partials(x, A, B, 2)[0][0])
    with pytest.raises(ValueError, match="must divide"):
        tp_mlp_partials(x, A, B, 3)
