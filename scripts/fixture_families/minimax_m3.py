"""MiniMax M3 fixture builders (`MiniMaxM3SparseForConditionalGeneration`, the released
vision-language class), merged by make_fixtures.py.

Both: 3 text layers (full attention + dense MLP of 96; then block-sparse attention + 8 experts of
32, top 2, with a shared MLP of 48, twice), 4 query and 2 KV heads of 32 with the per-head
(1 + w) QK norm, partial rotary 0.5 (16 of 32 dims, `rotary_dim` 16 to match), the lightning
indexer of 2 heads of 16 on the sparse layers, the clamped SwiGLU, `routed_scaling_factor` 2,
and a tiny vision tower (1 layer of 16) that TensorFold leaves unread. bf16. transformers saves
the released layout: `language_model.model.*`, `language_model.lm_head.weight`,
`block_sparse_moe.experts.{e}.w1/w3/w2`, `block_sparse_moe.shared_experts.{gate,up,down}_proj`,
`self_attn.index_{q,k}_{proj,norm}`.

- minimax_m3: `index_block_size` 4, `index_topk_blocks` 3, `index_local_blocks` 1: a row of the
  45-position golden forwards sees up to 12 blocks and keeps 3, so selection drops blocks.
  transformers breaks exact ties in the block scores by `torch.topk`'s order over a tensor whose
  width grows with the sequence, so a seed is accepted only when every row's selection boundary
  (the last kept vs the first dropped non-local block, per indexer head, in every sparse layer of
  every golden forward) is separated by INDEX_MARGIN: then any f32 implementation keeps the same
  blocks, whatever its tie rule.
- minimax_m3_cover: `index_block_size` 8, `index_topk_blocks` 8: 8 blocks of 8 cover every
  position of the golden forwards, so the sparse layers must equal dense attention; the builder
  checks that transformers' logits equal those of the same weights with the indexers removed.

Seeds are also accepted only when every router choice is separated by ROUTER_MARGIN (the k-th vs
(k+1)-th biased sigmoid score), as for minimax_m2.
"""

from __future__ import annotations

import re

import __main__ as mf  # make_fixtures.py, which loads this module
import torch
from transformers import MiniMaxM3SparseForConditionalGeneration, MiniMaxM3VLConfig

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2
ROUTER_MARGIN = 0.002  # k-th vs (k+1)-th biased score, every choice of the f32 golden forwards
INDEX_MARGIN = 0.002  # last kept vs first dropped block score, every row of the golden forwards
# The router gap a bf16 run is compared past: on the CUDA backend the router's f32 inputs drift
# through the bf16 matmuls before it, which flipped a biased score gap of 0.0059
# (minimax_m3_cover's 30-token prompt, position 1) where transformers' own bf16 run did not.
BF16_MARGIN = 0.008
# The block-score gap a bf16 run is compared past: transformers run in bf16 moves the first
# sparse layer's block scores (up to about 13) by up to 0.23 on minimax_m3's golden forwards.
BF16_INDEX_MARGIN = 0.5


def config(block_size: int, topk: int) -> MiniMaxM3VLConfig:
    text = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=32,
        dense_intermediate_size=96,
        shared_intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        num_local_experts=8,
        num_experts_per_tok=2,
        routed_scaling_factor=2.0,
        rotary_dim=16,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.5},
        layer_types=["full_attention", "minimax_m3_sparse", "minimax_m3_sparse"],
        mlp_layer_types=["dense", "sparse", "sparse"],
        index_n_heads=2,
        index_head_dim=16,
        index_block_size=block_size,
        index_topk_blocks=topk,
        index_local_blocks=1,
        tie_word_embeddings=False,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    vision = dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        patch_size=2,
        temporal_patch_size=1,
        spatial_merge_size=2,
        image_size=8,
    )
    return MiniMaxM3VLConfig(text_config=text, vision_config=vision, projector_hidden_size=32)


def make_minimax_m3():
    return MiniMaxM3SparseForConditionalGeneration, config(4, 3), torch.bfloat16


def make_minimax_m3_cover():
    return MiniMaxM3SparseForConditionalGeneration, config(8, 8), torch.bfloat16


def perturb_minimax_m3(model: torch.nn.Module, family: str, seed: int) -> None:
    """The shared perturbation; then the (1 + w) norms' w as N(0, 0.1^2) and the routers'
    e_score_correction_bias buffers N(0, 0.15^2)."""
    mf.perturb(model, family, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if "language_model" in name and "norm" in name:
                p.copy_((0.1 * torch.randn(p.shape, generator=g)).to(p.dtype))
        for name, buf in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                buf.copy_((0.15 * torch.randn(buf.shape, generator=g)).to(buf.dtype))


RENAMES = [
    (r"^language_model\.lm_head\.", "lm_head."),
    (r"^language_model\.model\.", "model.language_model."),
    (r"^vision_tower\.vision_model\.embeddings\.patch_embedding\.", "model.vision_tower.embeddings.proj."),
    (r"^vision_tower\.vision_model\.encoder\.layers\.", "model.vision_tower.layers."),
    (r"^vision_tower\.vision_model\.pre_layrnorm\.", "model.vision_tower.pre_layrnorm."),
    (r"^multi_modal_projector\.", "model.multi_modal_projector."),
    (r"^patch_merge_mlp\.linear_", "model.multi_modal_projector.merge_linear_"),
    (r"\.block_sparse_moe\.e_score_correction_bias", ".mlp.gate.e_score_correction_bias"),
    (r"\.block_sparse_moe\.", ".mlp."),
    (r"\.self_attn\.index_(q|k)_(proj|norm)\.", r".self_attn.indexer.\1_\2."),
]


def loaded_name(saved: str) -> str:
    """A saved tensor's name as transformers loads it (make_fixtures.py's checks)."""
    for pat, rep in RENAMES:
        saved = re.sub(pat, rep, saved)
    return re.sub(
        r"\.experts\.(\d+)\.w([123])\.", lambda m: f".experts.{m[1]}.{ {'1': 'gate', '3': 'up', '2': 'down'}[m[2]] }_proj.", saved
    )


def indexers(model):
    return [m for m in model.modules() if type(m).__name__ == "MiniMaxM3VLIndexer"]


@torch.no_grad()
def index_gaps(model, prompts, greedys) -> list:
    """Per prompt, each position's smallest selection-boundary gap over the sparse layers and
    indexer heads (inf where a row keeps every block it sees), over the golden forwards of
    prompt + greedy[:-1]. The block scores are recomputed from the indexer's own inputs as its
    forward computes them (no cache: the golden forwards run without one)."""
    rows, out = [], []

    def hook(mod, args, kwargs, _res):
        hidden, (cos, sin), pos = args[0], args[1], args[3]
        b, s, _ = hidden.shape
        q = mod.q_norm(mod.q_proj(hidden).view(b, s, -1, mod.head_dim)).transpose(1, 2)
        k = mod.k_norm(mod.k_proj(hidden).view(b, s, 1, mod.head_dim)).transpose(1, 2)
        from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import apply_rotary_pos_emb

        q, k = apply_rotary_pos_emb(q, k, cos[..., : mod.head_dim], sin[..., : mod.head_dim])
        scores = (q.float() @ k.float().transpose(-1, -2))[0]  # [H, S, S]
        gaps = torch.full((s,), float("inf"))
        for i in range(s):
            p = int(pos[0, i])
            own = p // mod.block_size
            if own + 1 <= mod.topk_blocks:
                continue
            local = {max(own - j, 0) for j in range(mod.local_blocks)}
            for h in range(scores.shape[0]):
                blocks = [
                    float(scores[h, i, c * mod.block_size : min((c + 1) * mod.block_size, p + 1)].max())
                    for c in range(own + 1)
                ]
                rest = sorted((blocks[c] for c in range(own + 1) if c not in local), reverse=True)
                keep = mod.topk_blocks - len(local)
                gaps[i] = min(gaps[i], rest[keep - 1] - rest[keep] if keep > 0 else float("inf"))
        rows.append(gaps)

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in indexers(model)]
    assert handles
    try:
        for p, g in zip(prompts, greedys):
            rows.clear()
            model(input_ids=torch.tensor([p["ids"] + g[:-1]]), use_cache=False)
            out.append(torch.stack(rows).min(0).values)
    finally:
        for h in handles:
            h.remove()
    return out


@torch.no_grad()
def router_gaps(model, prompts, greedys) -> list:
    """Per prompt, each position's smallest k-th vs (k+1)-th biased router score over the MoE
    layers, over the golden forwards."""
    gaps, out = [], []

    def hook(mod, _inp, res):
        scores = res[0].float().sigmoid() + mod.e_score_correction_bias.float()
        top = scores.topk(mod.top_k + 1, dim=-1).values
        gaps.append(top[:, mod.top_k - 1] - top[:, mod.top_k])

    handles = [m.register_forward_hook(hook) for m in model.modules() if type(m).__name__ == "MiniMaxM3VLTopKRouter"]
    assert handles
    try:
        for p, g in zip(prompts, greedys):
            gaps.clear()
            model(input_ids=torch.tensor([p["ids"] + g[:-1]]), use_cache=False)
            out.append(torch.stack(gaps).min(0).values)
    finally:
        for h in handles:
            h.remove()
    return out


@torch.no_grad()
def equals_dense(model, prompts, greedys) -> float:
    """The largest |logit| difference between the model and the same weights with every indexer
    removed (dense causal attention), over the golden forwards."""
    err = 0.0
    attns = [m for m in model.modules() if type(m).__name__ == "MiniMaxM3VLAttention" and m.indexer is not None]
    for p, g in zip(prompts, greedys):
        ids = torch.tensor([p["ids"] + g[:-1]])
        sparse = model(input_ids=ids, use_cache=False).logits
        kept = [a.indexer for a in attns]
        for a in attns:
            a.indexer = None
        try:
            dense = model(input_ids=ids, use_cache=False).logits
        finally:
            for a, ix in zip(attns, kept):
                a.indexer = ix
        err = max(err, float((sparse - dense).abs().max()))
    return err


def accept_minimax_m3(model, prompts, greedys) -> bool:
    r = min(float(g.min()) for g in router_gaps(model, prompts, greedys))
    i = min(float(g.min()) for g in index_gaps(model, prompts, greedys))
    print(f"  minimax_m3: router margin {r:.4f}, block selection margin {i:.4f}")
    return r >= ROUTER_MARGIN and i >= INDEX_MARGIN


def accept_minimax_m3_cover(model, prompts, greedys) -> bool:
    r = min(float(g.min()) for g in router_gaps(model, prompts, greedys))
    i = min(float(g.min()) for g in index_gaps(model, prompts, greedys))
    assert i == float("inf"), "the cover fixture's blocks must all be kept"
    err = equals_dense(model, prompts, greedys)
    print(f"  minimax_m3_cover: router margin {r:.4f}, max |sparse - dense logit| {err:.2e}")
    assert err == 0.0, err
    return r >= ROUTER_MARGIN


def golden_extra(model, prompts, greedys) -> dict:
    """`route_exact_positions`: each prompt's leading positions whose router choices clear
    BF16_MARGIN and whose block choices clear BF16_INDEX_MARGIN (a bf16 run can flip a narrower
    one; the causal outputs before it cannot depend on it)."""
    routers, blocks = router_gaps(model, prompts, greedys), index_gaps(model, prompts, greedys)
    exact = [
        int(((r >= BF16_MARGIN) & (b >= BF16_INDEX_MARGIN)).long().cumprod(0).sum()) for r, b in zip(routers, blocks)
    ]
    margins = [float(g.min()) for g in blocks]
    print(f"  route_exact_positions {exact}, block selection margins {margins}")
    out = {"route_exact_positions": exact, "route_margin": BF16_MARGIN, "index_bf16_margin": BF16_INDEX_MARGIN}
    finite = [round(m, 4) for m in margins if m != float("inf")]
    if finite:
        out["index_min_selection_margin"] = min(finite)
    return out


FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "minimax_m3": (make_minimax_m3, 9300, False),
    "minimax_m3_cover": (make_minimax_m3_cover, 9400, False),
}

WEIGHT_STD = {
    #                    embed, lm_head, router, in-proj, out-proj
    "minimax_m3": (0.5, 0.5, 0.5, 0.12, 0.12),
    "minimax_m3_cover": (0.5, 0.5, 0.5, 0.12, 0.12),
}

PERTURB = {"minimax_m3": perturb_minimax_m3, "minimax_m3_cover": perturb_minimax_m3}
ACCEPT = {"minimax_m3": accept_minimax_m3, "minimax_m3_cover": accept_minimax_m3_cover}
LOADED_NAME = {"minimax_m3": loaded_name, "minimax_m3_cover": loaded_name}
GOLDEN_EXTRA = {"minimax_m3": golden_extra, "minimax_m3_cover": golden_extra}
LOADER = {"minimax_m3": MiniMaxM3SparseForConditionalGeneration, "minimax_m3_cover": MiniMaxM3SparseForConditionalGeneration}
