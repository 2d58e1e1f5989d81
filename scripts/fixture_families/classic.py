"""Classic dense fixture builders, merged by make_fixtures.py: the Llama-shaped families most
served before the hybrids.

qwen2 (`Qwen2ForCausalLM`: Qwen2 / Qwen2.5, QwQ, the R1 distills): q, k and v projections with
biases, o without; `use_sliding_window` with `max_window_layers` 1 of 2, so layer 0 attends to
everything and layer 1 to its last 8 positions (the golden prompts run to 30). bf16. Its
tokenizer splits digits one at a time, as Qwen2's does (transformers' Qwen2Tokenizer imposes it).

mistral (`MistralForCausalLM`): every layer sliding over its last 8 positions, head_dim 32 set
apart from hidden / heads, untied head. bf16.

gemma2 (`Gemma2ForCausalLM`): 4 layers, sliding (over 8) and full alternating from a sliding one,
one rope, `(1 + w)` sandwich norms weighted as the gemma3 fixture's, `query_pre_attn_scalar` 24,
attention scores soft-capped at 10 and logits at 15 (tight enough to bend them). bf16.

phi3 (`Phi3ForCausalLM`: Phi-3, Phi-4): q, k and v fused in `qkv_proj`, gate and up in
`gate_up_proj`; every layer sliding over 8; partial rotary 0.75 (12 of 16 dims). bf16.

phi3_longrope (Phi-3.5, Phi-4-mini): phi3 with LongRoPE, a short and a long factor for each of
the 6 rotated frequencies, pretrained context 256 of 512 (so cos and sin scale by
sqrt(1 + ln 2 / ln 256)). transformers takes the short factors for a forward of at most 256
positions, which every golden prompt is; golden.json's `long_prompt` holds the last rows of its
logits for 300 positions, which take the long factors.
"""

from __future__ import annotations

import __main__ as mf  # make_fixtures.py, which loads this module
import torch
from tokenizers import Regex, Tokenizer, pre_tokenizers
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

# Qwen2's split (digits one at a time), which transformers' Qwen2Tokenizer puts in place of the
# tokenizer.json's own: the fixture's tokenizer.json says it too, so both agree.
QWEN2_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def qwen2_tokenizer(base: Tokenizer, add_bos: bool):
    tok = Tokenizer.from_str(base.to_str())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    return mf.tokenizer_for(tok, add_bos)


def classic_kwargs():
    """make_fixtures.py's shared sizes (without its `attention_bias`: these configs have their
    own), two layers, SiLU."""
    kw = {k: v for k, v in mf.common_kwargs().items() if k != "attention_bias"}
    return {**kw, "num_hidden_layers": 2, "hidden_act": "silu"}


def make_qwen2():
    cfg = Qwen2Config(
        **classic_kwargs(),
        tie_word_embeddings=True,
        use_sliding_window=True,
        sliding_window=8,
        max_window_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )
    return Qwen2ForCausalLM, cfg, torch.bfloat16


def make_mistral():
    cfg = MistralConfig(
        **classic_kwargs(),
        head_dim=32,
        tie_word_embeddings=False,
        sliding_window=8,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )
    return MistralForCausalLM, cfg, torch.bfloat16


def make_gemma2():
    kw = classic_kwargs()
    del kw["hidden_act"]
    cfg = Gemma2Config(
        **{**kw, "num_hidden_layers": 4},
        head_dim=32,
        hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True,
        query_pre_attn_scalar=24,
        sliding_window=8,
        final_logit_softcapping=15.0,
        attn_logit_softcapping=10.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    return Gemma2ForCausalLM, cfg, torch.bfloat16


def make_phi3():
    cfg = Phi3Config(
        **classic_kwargs(),
        tie_word_embeddings=False,
        sliding_window=8,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75},
    )
    return Phi3ForCausalLM, cfg, torch.bfloat16


LONGROPE_ORIGINAL = 256
LONG_PROMPT_LEN = 300
LONG_PROMPT_ROWS = 4


def make_phi3_longrope():
    kw = {**classic_kwargs(), "max_position_embeddings": 2 * LONGROPE_ORIGINAL}
    cfg = Phi3Config(
        **kw,
        tie_word_embeddings=False,
        sliding_window=8,
        original_max_position_embeddings=LONGROPE_ORIGINAL,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.75,
            "original_max_position_embeddings": LONGROPE_ORIGINAL,
            "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
            "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
        },
    )
    return Phi3ForCausalLM, cfg, torch.bfloat16


@torch.no_grad()
def long_prompt(model, prompts, greedys) -> dict:
    """The last LONG_PROMPT_ROWS rows of the logits of LONG_PROMPT_LEN fixed ids (past the
    pretrained context, so transformers takes the long factors)."""
    ids = [6 + (37 * i + 11) % 470 for i in range(LONG_PROMPT_LEN)]
    logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    rows = logits[-LONG_PROMPT_ROWS:]
    return {"long_prompt": {"ids": ids, "last_rows": [[float(v) for v in r] for r in rows]}}


def perturb_gemma2(model: torch.nn.Module, family: str, seed: int) -> None:
    """The gemma3 fixture's weights: its large post-branch and final norm gains."""
    mf.perturb(model, "gemma3", seed)


FAMILIES = {
    "qwen2": (make_qwen2, 38000, False),
    "mistral": (make_mistral, 39000, True),
    "gemma2": (make_gemma2, 40000, True),
    "phi3": (make_phi3, 41000, False),
    "phi3_longrope": (make_phi3_longrope, 42000, False),
}

GOLDEN_EXTRA = {"phi3_longrope": long_prompt}

PERTURB = {"gemma2": perturb_gemma2}

TOKENIZER = {"qwen2": qwen2_tokenizer}

WEIGHT_STD = {
    #           embed, lm_head, router, in-proj, out-proj
    "qwen2": (0.5, None, 0.3, 0.25, 0.4),
    "mistral": (0.5, 0.5, 0.3, 0.12, 0.12),
    "gemma2": (0.1, None, 0.3, 0.2, 0.1),
    "phi3": (0.5, 0.5, 0.3, 0.12, 0.12),
    "phi3_longrope": (0.5, 0.5, 0.3, 0.12, 0.12),
}
