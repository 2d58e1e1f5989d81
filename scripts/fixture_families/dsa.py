"""DeepSeek sparse attention fixture builders (`GlmMoeDsaForCausalLM`, `DeepseekV32ForCausalLM`),
merged by make_fixtures.py.

Every one: deepseek_v3's shapes (3 layers, layer 0 dense, layers 1-2 eight routed experts of 32 in
2 groups, top-2, one shared expert; multi-head latent attention over 4 heads with `q_lora_rank`
48, `kv_lora_rank` 32, `qk_nope_head_dim` 24, `qk_rope_head_dim` 16, `v_head_dim` 20, YaRN rope
with `mscale_all_dim`), plus the lightning indexer of each layer: `index_n_heads` 16 heads of
`index_head_dim` 32 (the first 16 dims roped), its `k_norm` a LayerNorm with a random bias.

glm_moe_dsa: `index_topk` 8, GLM-5's indexer (interleaved rope). deepseek_v32: `index_topk` 8,
DeepSeek-V3.2's indexer (rotate-half rope). deepseek_v32_allkeys: `index_topk` 64, more than any
golden forward's length, so every key is kept; its logits are checked here to equal those of
`DeepseekV3ForCausalLM` (dense MLA) over the same weights without the indexer.

transformers breaks exact ties of the index scores in an order that depends on the length of the
forward, so with `index_topk` below the length a seed is accepted only when, over every forward
the golden data comes from (prompt + greedy[:-1]), every layer and every query with more causal
keys than `index_topk`, the k-th and (k+1)-th best index scores differ by at least INDEX_MARGIN
(relative to the query's largest score): no near-tie at the boundary of the kept set. Routers are
held to ROUTER_MARGIN as deepseek_v3's. bf16.
"""

from __future__ import annotations

import __main__ as mf  # make_fixtures.py, which loads this module
import torch
import torch.nn.functional as F
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, DeepseekV32Config, DeepseekV32ForCausalLM
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM
from transformers.models.deepseek_v32.modeling_deepseek_v32 import apply_rotary_pos_emb as v32_rope
from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import apply_rotary_pos_emb_interleave as glm_rope

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2
ROUTER_MARGIN = 0.002  # k-th vs (k+1)-th biased score, topk_group-th vs next group score
INDEX_MARGIN = 2e-4  # k-th vs (k+1)-th index score, over the query's largest |score|
# The relative index-score gap a bf16 run is compared past (route_exact_positions): transformers
# run in bf16 moves the first layer's index scores by up to 5.9% of the row's largest on
# glm_moe_dsa's golden forwards (2.4% on deepseek_v32's).
BF16_INDEX_MARGIN = 0.12
ALLKEYS_TOLERANCE = 2e-5  # sparse with every key kept vs dense MLA, max |logit difference|

ROPE = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 0.8,
}


def shared_kwargs(**over) -> dict:
    kw = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        n_shared_experts=1,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_nope_head_dim=24,
        qk_rope_head_dim=16,
        v_head_dim=20,
        hidden_act="silu",
        rms_norm_eps=1e-5,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        rope_parameters=dict(ROPE),
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    kw.update(over)
    return kw


INDEXER = dict(index_n_heads=16, index_head_dim=32)


def make_glm_moe_dsa():
    cfg = GlmMoeDsaConfig(**shared_kwargs(**INDEXER, index_topk=8, num_nextn_predict_layers=0))
    return GlmMoeDsaForCausalLM, cfg, torch.bfloat16


def make_deepseek_v32():
    cfg = DeepseekV32Config(**shared_kwargs(**INDEXER, index_topk=8, num_nextn_predict_layers=0))
    return DeepseekV32ForCausalLM, cfg, torch.bfloat16


def make_deepseek_v32_allkeys():
    cfg = DeepseekV32Config(**shared_kwargs(**INDEXER, index_topk=64, num_nextn_predict_layers=0))
    return DeepseekV32ForCausalLM, cfg, torch.bfloat16


def perturb_dsa(model: torch.nn.Module, family: str, seed: int) -> None:
    """The shared perturbation; then the routers' e_score_correction_bias N(0, 0.15^2) and the
    indexer's k_norm bias N(0, 0.3^2) (the shared rule would give it 1 + N(0, 0.1^2), a common
    offset of every key that flattens the index scores across keys)."""
    mf.perturb(model, family, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buf in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                buf.copy_((0.15 * torch.randn(buf.shape, generator=g)).to(buf.dtype))
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("indexer.k_norm.bias"):
                p.copy_((0.3 * torch.randn(p.shape, generator=g)).to(p.dtype))


def index_scores(mod, hidden_states, q_resid, position_embeddings, attention_mask) -> torch.Tensor:
    """The indexer's `[S, T]` scores of one forward without a cache, by the module's own steps (its
    `forward` returns only the chosen indices)."""
    apply = glm_rope if "Glm" in type(mod).__name__ else v32_rope
    b, s, _ = hidden_states.shape
    cos, sin = position_embeddings
    q = mod.wq_b(q_resid).view(b, s, mod.n_heads, mod.head_dim)
    q_rot, q_pass = torch.split(q, [mod.qk_rope_head_dim, mod.head_dim - mod.qk_rope_head_dim], dim=-1)
    k = mod.k_norm(mod.wk(hidden_states)).unsqueeze(2)
    k_rot, k_pass = torch.split(k, [mod.qk_rope_head_dim, mod.head_dim - mod.qk_rope_head_dim], dim=-1)
    q_rot, k_rot = apply(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
    q = torch.cat([q_rot, q_pass], dim=-1)
    k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
    scores = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * mod.softmax_scale)
    weights = mod.weights_proj(hidden_states.to(mod.weights_proj.weight.dtype)).float() * (mod.n_heads**-0.5)
    return torch.matmul(weights.unsqueeze(-2), scores).squeeze(-2)[0]


@torch.no_grad()
def index_position_gaps(model, prompts, greedys) -> list[torch.Tensor]:
    """Per prompt, each position's smallest relative gap between the k-th and (k+1)-th index
    score over the layers (inf where a query has at most `index_topk` causal keys), over the
    golden forwards of prompt + greedy[:-1]; each recomputed choice with a gap of at least
    INDEX_MARGIN is checked against the indexer's own."""
    rows, out = [], []

    def hook(mod, args, kwargs, res):
        hs, q_resid, pe, mask = args[:4]
        sc = index_scores(mod, hs, q_resid, pe, mask)
        k = mod.index_topk
        gaps = torch.full((sc.shape[0],), float("inf"))
        for i in range(sc.shape[0]):
            if i + 1 <= k:
                continue  # every causal key kept
            row = sc[i, : i + 1]
            top = torch.sort(row, descending=True).values
            scale = max(float(row.abs().max()), 1e-30)
            gaps[i] = float(top[k - 1] - top[k]) / scale
            if gaps[i] >= INDEX_MARGIN:  # no tie: the same keys as the indexer's
                mine = set(torch.topk(row, k).indices.tolist())
                assert mine == set(res[0, i].tolist()), (i, mine, res[0, i].tolist())
        rows.append(gaps)

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in model.modules() if type(m).__name__.endswith("Indexer")]
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


def index_gaps(model, prompts, greedys) -> float:
    """The smallest of [`index_position_gaps`] over every golden forward."""
    return min(float(g.min()) for g in index_position_gaps(model, prompts, greedys))


@torch.no_grad()
def dense_mla_error(model, prompts) -> float:
    """Max |logit difference| between the model and `DeepseekV3ForCausalLM` (dense MLA, which
    interleaves rope as the sparse families' attention does) over the same weights less the
    indexers."""
    c = model.config
    keys = [k for k in shared_kwargs() if k not in ("rope_parameters",)]
    dense_cfg = DeepseekV3Config(
        **{k: getattr(c, k) for k in keys}, rope_parameters=dict(c.rope_parameters), rope_interleave=True
    )
    dense_cfg._attn_implementation = "eager"
    dense = DeepseekV3ForCausalLM(dense_cfg).eval().float()
    own = {k: v for k, v in model.state_dict().items() if ".indexer." not in k}
    missing, unexpected = dense.load_state_dict(own, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    err = 0.0
    for p in prompts:
        ids = torch.tensor([p["ids"]])
        err = max(err, float((model(input_ids=ids).logits - dense(input_ids=ids).logits).abs().max()))
    return err


def accept_dsa(model, prompts, greedys) -> bool:
    r = min(float(g.min()) for g in mf.route_choice_gaps(model, prompts, greedys))
    i = index_gaps(model, prompts, greedys)
    print(f"  router margin {r:.4f}, index margin {i:.4f}")
    return r >= ROUTER_MARGIN and i >= INDEX_MARGIN


def accept_allkeys(model, prompts, greedys) -> bool:
    err = dense_mla_error(model, prompts)
    print(f"  every key kept: max |logit - dense MLA's| {err:.2e}")
    assert err <= ALLKEYS_TOLERANCE, err
    r = min(float(g.min()) for g in mf.route_choice_gaps(model, prompts, greedys))
    print(f"  router margin {r:.4f}")
    return r >= ROUTER_MARGIN


def golden_extra(model, prompts, greedys) -> dict:
    """make_fixtures.py's `route_exact_positions`, each prompt's count cut further at the first
    position whose index choice is narrower than BF16_INDEX_MARGIN: a bf16 run (its queries, keys
    and weights rounded) can flip such a choice, and the causal outputs before it cannot depend
    on it."""
    extra = mf.route_exact_positions(model, prompts, greedys)
    if model.config.index_topk < max(len(p["ids"]) + len(g) for p, g in zip(prompts, greedys)):
        gaps = index_position_gaps(model, prompts, greedys)
        extra["route_exact_positions"] = [
            min(n, int((g >= BF16_INDEX_MARGIN).long().cumprod(0).sum()))
            for n, g in zip(extra["route_exact_positions"], gaps)
        ]
        extra["index_min_topk_margin"] = round(min(float(g.min()) for g in gaps), 4)
        extra["index_bf16_margin"] = BF16_INDEX_MARGIN
        print(f"  with the index choices: route_exact_positions {extra['route_exact_positions']}")
    return extra


for _router in ("GlmMoeDsaTopkRouter", "DeepseekV32TopkRouter"):
    mf.ROUTER_CHOICE_GAPS[_router] = mf._grouped_sigmoid_choice_gaps

FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "glm_moe_dsa": (make_glm_moe_dsa, 9800, False),
    "deepseek_v32": (make_deepseek_v32, 9900, False),
    "deepseek_v32_allkeys": (make_deepseek_v32_allkeys, 9950, False),
}

WEIGHT_STD = {f: (0.5, 0.5, 0.5, 0.12, 0.12) for f in FAMILIES}
PERTURB = {f: perturb_dsa for f in FAMILIES}
ACCEPT = {"glm_moe_dsa": accept_dsa, "deepseek_v32": accept_dsa, "deepseek_v32_allkeys": accept_allkeys}
GOLDEN_EXTRA = {f: golden_extra for f in FAMILIES}
