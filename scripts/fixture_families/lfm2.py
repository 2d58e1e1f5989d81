"""LFM2-family fixture builders (short convolution and attention layers), merged by
make_fixtures.py.

lfm2: layers conv, full, conv; double-gated short conv with conv_L_cache 3, attention with QK
norm (4 query heads, 2 KV heads of 16), SwiGLU MLP sized by the block_auto_adjust_ff_dim rule
(intermediate_size 128 -> int(2 * 128 / 3) = 85 -> rounded up to a multiple of 32 = 96), tied
embeddings, `embedding_norm` as the final norm.
"""

from __future__ import annotations

import torch
from transformers import Lfm2Config, Lfm2ForCausalLM

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2


def lfm2_kwargs():
    return dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        norm_eps=1e-5,
        max_position_embeddings=256,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )


def make_lfm2():
    cfg = Lfm2Config(
        **lfm2_kwargs(),
        num_hidden_layers=3,
        layer_types=["conv", "full_attention", "conv"],
        conv_L_cache=3,
        conv_bias=False,
        block_auto_adjust_ff_dim=True,
        block_ffn_dim_multiplier=1.0,
        block_multiple_of=32,
        tie_word_embeddings=True,
    )
    return Lfm2ForCausalLM, cfg, torch.bfloat16


FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "lfm2": (make_lfm2, 7000, True),
}

WEIGHT_STD = {
    #          embed, lm_head, router, in-proj, out-proj
    "lfm2": (0.5, None, 0.3, 0.25, 0.3),
}


def perturb_lfm2(model: torch.nn.Module, family: str, seed: int) -> None:
    """Seeded random values for every parameter (sorted by name): norms near 1, conv taps of
    a real kernel's size, output projections (`out_proj`, `w2`) at the out-proj scale."""
    e_std, h_std, r_std, in_std, out_std = WEIGHT_STD[family]
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                v = 1.0 + 0.1 * r
            elif "embed_tokens" in name:
                v = e_std * r
            elif "lm_head" in name:
                v = h_std * r
            elif name.endswith("conv.conv.weight"):
                v = 0.5 * r
            elif name.endswith(".bias"):
                v = 0.1 * r
            elif name.endswith("feed_forward.gate.weight"):  # MoE router
                v = r_std * r
            elif "out_proj" in name or name.endswith("w2.weight"):
                v = out_std * r
            else:
                v = in_std * r
            p.copy_(v.to(p.dtype))


PERTURB = {"lfm2": perturb_lfm2}
