#!/usr/bin/env python3
"""Generate TensorFold's golden test fixtures under tests/fixtures/<family>/.

For each family (llama, qwen3, gemma3, qwen3_moe) this writes a tiny random-weight
checkpoint saved by transformers 5.x `save_pretrained` (config.json,
generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json)
plus golden outputs (golden.safetensors, golden.json) computed in float32 from the
checkpoint exactly as saved (reloaded from disk, bf16/f16 weights upcast to f32,
eager attention). MoE families also record `route_exact_positions` (see
route_exact_positions below): the leading positions whose routing a bf16 run cannot
flip by rounding, the ones a bf16 backend is compared on.

Deterministic: fixed seeds, no network. Re-running gives byte-identical files for
the same torch / transformers / tokenizers versions.

Usage (from the repository root):
    python3 scripts/make_fixtures.py            # writes tests/fixtures/
    python3 scripts/make_fixtures.py --out DIR  # writes elsewhere
    python3 scripts/make_fixtures.py --families qwen3_fp8 qwen3_moe_fp8 qwen3_ct_fp8
        # only the FP8 fixtures, quantized from the qwen3 / qwen3_moe fixtures already written
        # (scripts/fixture_fp8.py)
    python3 scripts/make_fixtures.py --families glm4_moe_mtp deepseek_v3_mtp
        # only the MTP fixtures, one layer appended to the glm4_moe / deepseek_v3 fixtures
        # already written (scripts/fixture_mtp.py)
    python3 scripts/make_fixtures.py --families gemma4_assistant gemma4_assistant_ordered
        # only the Gemma 4 assistant drafters of the gemma4 / gemma4_kvshare fixtures already
        # written (scripts/fixture_gemma4_assistant.py)
    python3 scripts/make_fixtures.py --route-only --families qwen3_moe ...
        # only recomputes the families' GOLDEN_EXTRA fields (route_exact_positions) from the
        # fixtures already written, checks the reloaded model still gives their golden logits
        # and greedy tokens, and rewrites golden.json with nothing else changed
    python3 scripts/make_fixtures.py --bf16-only --families gemma4 ...
        # only recomputes `bf16_rel_err` (below) of fixtures already written

Every family's golden.json also records `bf16_rel_err`: per prompt, the largest |logit - golden|
of transformers' own bfloat16 run of the checkpoint (eager, on the CPU) over the compared
positions, as a fraction of the prompt's largest |golden logit|. A bf16 backend's golden check
allows at least that much (crates/testkit golden.rs): some families' own bf16 runs land past the
fixed tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

transformers.utils.logging.disable_progress_bar()
assert int(transformers.__version__.split(".")[0]) >= 5, "transformers 5.x required"

VOCAB_SIZE = 512  # config vocab_size / embedding rows (> tokenizer length on purpose)
TOKENIZER_VOCAB = 480  # BPE trainer target (incl. special tokens)
PAD, BOS, EOS = 0, 1, 2
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<|im_start|>", "<|im_end|>", "<unk>"]
N_GREEDY = 16
MIN_GREEDY_MARGIN = 0.02  # top1 - top2 logit gap required at every greedy step
MIN_ROUTER_MARGIN = 0.01  # MoE: k-th vs (k+1)-th router logit gap required at every token
# MoE: the choice-value gap (k-th vs (k+1)-th expert, and kept vs next group) that every layer's
# routing of a position must clear for a bf16 run to be compared there (route_exact_positions).
ROUTE_MARGIN = 0.004

# Llama-3 / Qwen2-style pre-tokenizer split pattern.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CORPUS = r"""
The old lighthouse stood at the edge of the cliff, its white paint peeling in long
curls after a hundred winters of salt and wind. Every evening the keeper climbed the
one hundred and twelve steps, trimmed the wick, and wound the clockwork that turned
the great lens. Ships passing in the night saw the beam sweep across the water once
every nine seconds, and they knew where the rocks were.

In the village below, the baker opened her shop at five o'clock in the morning. She
made bread, rolls, and small sweet cakes with raisins. Children stopped on their way
to school to buy a warm roll for two coins; the fishermen bought whole loaves and
wrapped them in cloth before they went out to sea. When the weather turned bad, the
harbour filled with boats and the shop was crowded until noon.

Science is a way of asking questions about the world and testing the answers. A good
experiment changes one thing at a time and measures what happens. If the result is
surprising, we repeat it; if it is still surprising, we learn something new. Water
boils at 100 degrees Celsius at sea level, but at lower temperatures on a high
mountain, because the air pressure there is lower.

"Where are you going?" asked the fox.
"To the river," said the rabbit, "to see whether the ice has melted."
"Then I will come with you," said the fox, "because I am thirsty, and the river is
far too cold to cross alone."

The committee met on Tuesday, 14 March, at 3:30 pm. Items on the agenda: (1) the
budget for next year; (2) repairs to the roof of the town hall; (3) a proposal to
plant forty new trees along the main road. The budget was approved with 7 votes in
favour and 2 against. The repairs will cost about 12,500 euros.

Learning a language takes time. First you learn the sounds, then simple words such as
water, bread, house, and friend. Later you learn to build sentences, to ask for
directions, and to tell a story. The most important thing is to practise every day,
even if only for ten minutes, and not to be afraid of making mistakes.

def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

for i in range(10):
    print(i, fibonacci(i))

fn main() {
    let numbers = vec![1, 2, 3, 4, 5];
    let total: i32 = numbers.iter().sum();
    println!("total = {}", total);
}

{"name": "example", "version": "1.0.0", "values": [0.5, 1.25, -3]}

The café on the corner serves coffee, tea, and hot chocolate. Its menu says: naïve
prices, fair trade, open daily ✓. On Sundays there is music in the evening, and the
owner tells stories about the years she spent travelling through Europe and Asia.
"""

ENCODE_STRINGS = [
    "Hello, world!",
    "  leading spaces and   multiple   gaps ",
    "Numbers: 3.14159, 42, and 1,000,000; done.",
    "line one\nline two\n\n\tindented with a tab",
    "Le café est ouvert ✓ — naïve 日本語 🙂",
    "special tokens as text: <eos> then <bos> and <|im_start|>user",
]

TEXT_PROMPT = "Where are you going? asked the fox."


# --------------------------------------------------------------------------- tokenizer


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        min_frequency=2,
        show_progress=False,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    # Repeat the corpus a few times so that merge counts are comfortably above min_frequency.
    tok.train_from_iterator([CORPUS] * 3, trainer=trainer)
    for i, t in enumerate(SPECIAL_TOKENS[:3]):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    return tok


def tokenizer_for(base: Tokenizer, add_bos: bool) -> PreTrainedTokenizerFast:
    tok = Tokenizer.from_str(base.to_str())
    if add_bos:
        # Like Llama 3 / Gemma: BOS prepended by a TemplateProcessing post-processor.
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A:0",
            pair="<bos> $A:0 <bos>:1 $B:1",
            special_tokens=[("<bos>", BOS)],
        )
    else:
        # Like Qwen: ByteLevel post-processor, adds no special tokens.
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        clean_up_tokenization_spaces=False,
        model_max_length=256,
    )
    return fast


# --------------------------------------------------------------------------- models


def common_kwargs():
    return dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        attention_bias=False,
    )


def make_llama():
    cfg = LlamaConfig(
        **common_kwargs(),
        num_hidden_layers=2,
        hidden_act="silu",
        tie_word_embeddings=False,
        mlp_bias=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            # 64 (not 32) so that, with head_dim 16 and theta 5e5, the rotary
            # frequencies fall in all three llama3 bands: wavelength 6.3 < 16 (kept),
            # 32.5 in [16, 64] (smoothly interpolated), >= 168 > 64 (divided by factor).
            "original_max_position_embeddings": 64,
        },
    )
    return LlamaForCausalLM, cfg, torch.float32


def make_qwen3():
    cfg = Qwen3Config(
        **common_kwargs(),
        num_hidden_layers=2,
        head_dim=32,
        hidden_act="silu",
        tie_word_embeddings=True,
        use_sliding_window=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )
    return Qwen3ForCausalLM, cfg, torch.bfloat16


def make_gemma3():
    cfg = Gemma3TextConfig(
        **common_kwargs(),
        num_hidden_layers=4,
        head_dim=32,
        hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True,
        query_pre_attn_scalar=24,
        sliding_window=8,
        sliding_window_pattern=2,  # legacy key, consistent with layer_types (saved as _sliding_window_pattern)
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
        },
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
    )
    return Gemma3ForCausalLM, cfg, torch.bfloat16


def make_qwen3_moe():
    cfg = Qwen3MoeConfig(
        **common_kwargs(),
        num_hidden_layers=2,
        head_dim=32,  # explicit, != hidden/heads, like real Qwen3-MoE configs
        hidden_act="silu",
        tie_word_embeddings=False,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[0],
        use_sliding_window=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )
    return Qwen3MoeForCausalLM, cfg, torch.float16


FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "llama": (make_llama, 1000, True),
    "qwen3": (make_qwen3, 2000, False),
    "gemma3": (make_gemma3, 3000, True),
    "qwen3_moe": (make_qwen3_moe, 4000, False),
}


# Standard deviations of the random weights, per family. Tied-embedding models need
# strong residual-branch outputs, or the residual stream stays dominated by the input
# token's own embedding and greedy decoding just repeats the last token.
WEIGHT_STD = {
    #            embed, lm_head, router, in-proj, out-proj (o_proj / down_proj)
    "llama": (0.5, 0.5, 0.3, 0.08, 0.08),
    "qwen3": (0.5, None, 0.3, 0.25, 0.4),
    "gemma3": (0.1, None, 0.3, 0.2, 0.1),
    "qwen3_moe": (0.5, 0.5, 0.5, 0.08, 0.08),
}
# Further families live in scripts/fixture_families/<group>.py, each module defining FAMILIES
# and WEIGHT_STD as above (merged here) and optionally PERTURB: {family: fn(model, family,
# seed)} to replace perturb() for its families, and LOADED_NAME: {family: fn(saved_name) ->
# the name transformers loads it as} where its checkpoints save other names (Nemotron-H's
# backbone.*), and ACCEPT: {family: fn(model, prompts, greedys) -> bool} to reject a seed's
# weights by a family's own rule (a router's margins), and GOLDEN_EXTRA: {family: fn(model,
# prompts, greedys) -> dict} of further golden.json fields, and ATTEMPTS: {family: n} to try n
# seeds instead of DEFAULT_ATTEMPTS where its rules reject most; they may import this module's
# helpers; PRECHECK: {family: fn(model, prompts) -> bool} rejects a seed before greedy decoding
# (a necessary condition of its ACCEPT rule on the prompts alone, so most seeds cost little);
# LOADER: {family: model class} to load the saved checkpoint with where AutoModelForCausalLM does
# not (a composite model's text decoder, a vision-language class whose text part is the fixture), AFTER_SAVE: {family: fn(out, model)} to rewrite what
# save_pretrained wrote into the layout released checkpoints have (before it is reloaded), and
# CHECK_SAVED: {family: fn(saved, loaded)} in place of check_saved_matches_loaded, and TOKENIZER:
# {family: fn(base, add_bos) -> PreTrainedTokenizerFast} in place of tokenizer_for, where
# transformers' tokenizer class for the family's model_type overrides what tokenizer.json says.
DEFAULT_ATTEMPTS = 200
TOKENIZER = {}
LOADER = {}
AFTER_SAVE = {}
CHECK_SAVED = {}
PRECHECK = {}
ATTEMPTS = {}
EXTRA_PERTURB = {}
GOLDEN_EXTRA = {"qwen3_moe": lambda *a: route_exact_positions(*a)}
EXTRA_ACCEPT = {}
LOADED_NAME = {}


def load_family_modules() -> None:
    import importlib.util

    here = Path(__file__).resolve().parent / "fixture_families"
    for path in sorted(here.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"fixture_families.{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        FAMILIES.update(mod.FAMILIES)
        WEIGHT_STD.update(mod.WEIGHT_STD)
        EXTRA_PERTURB.update(getattr(mod, "PERTURB", {}))
        EXTRA_ACCEPT.update(getattr(mod, "ACCEPT", {}))
        GOLDEN_EXTRA.update(getattr(mod, "GOLDEN_EXTRA", {}))
        LOADED_NAME.update(getattr(mod, "LOADED_NAME", {}))
        ATTEMPTS.update(getattr(mod, "ATTEMPTS", {}))
        PRECHECK.update(getattr(mod, "PRECHECK", {}))
        LOADER.update(getattr(mod, "LOADER", {}))
        AFTER_SAVE.update(getattr(mod, "AFTER_SAVE", {}))
        CHECK_SAVED.update(getattr(mod, "CHECK_SAVED", {}))
        TOKENIZER.update(getattr(mod, "TOKENIZER", {}))


GEMMA_POST_NORM = 4.0  # (1 + w) ~ 5
GEMMA_FINAL_NORM = 4.0  # (1 + w) ~ 5


def perturb(model: torch.nn.Module, family: str, seed: int) -> None:
    """Overwrite every parameter with seeded random values (sorted by name)."""
    e_std, h_std, r_std, in_std, out_std = WEIGHT_STD[family]
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name and family == "gemma3":
                # Gemma's RMSNorm multiplies by (1 + w). Larger post-branch and final norm
                # gains (as in real Gemma checkpoints) keep the x8-scaled embedding from
                # dominating the residual stream and give non-flat logits.
                if "post_attention_layernorm" in name or "post_feedforward_layernorm" in name:
                    v = GEMMA_POST_NORM + 0.1 * r
                elif name == "model.norm.weight":
                    v = GEMMA_FINAL_NORM + 0.1 * r
                else:
                    v = 0.1 * r
            elif "norm" in name:
                v = 1.0 + 0.1 * r
            elif "embed_tokens" in name:
                v = e_std * r
            elif "lm_head" in name:
                v = h_std * r
            elif name.endswith("mlp.gate.weight"):  # MoE router
                v = r_std * r
            elif "o_proj" in name or "down_proj" in name:
                v = out_std * r
            else:
                v = in_std * r
            p.copy_(v.to(p.dtype))


# --------------------------------------------------------------------------- golden


@torch.no_grad()
def greedy(model, ids: list[int], n: int):
    seq = list(ids)
    out, margins = [], []
    for _ in range(n):
        logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float()
        top2 = torch.topk(logits, 2)
        nxt = int(top2.indices[0])
        margins.append(float(top2.values[0] - top2.values[1]))
        out.append(nxt)
        seq.append(nxt)  # EOS is ignored on purpose
    return out, margins


def make_prompts(fast: PreTrainedTokenizerFast, seed: int, add_bos: bool):
    g = torch.Generator().manual_seed(seed + 7)
    tok_len = len(fast)
    prompts = []
    # 1. length one
    if add_bos:
        prompts.append({"ids": [BOS], "text": None})
    else:
        one = fast("The", add_special_tokens=True)["input_ids"]
        assert len(one) == 1, one
        prompts.append({"ids": one, "text": "The"})
    # 2. short text prompt with the family's BOS rule
    ids = fast(TEXT_PROMPT, add_special_tokens=True)["input_ids"]
    prompts.append({"ids": ids, "text": TEXT_PROMPT})
    # 3. ~12 random ids, one of them an embedding row that has no token
    r = torch.randint(3, VOCAB_SIZE, (12,), generator=g).tolist()
    r[5] = int(torch.randint(tok_len, VOCAB_SIZE, (1,), generator=g))
    prompts.append({"ids": r, "text": None})
    # 4. 30 random ids (longer than gemma3's sliding window of 8)
    r = torch.randint(3, VOCAB_SIZE, (30,), generator=g).tolist()
    r[3] = VOCAB_SIZE - 1
    r[17] = tok_len
    prompts.append({"ids": r, "text": None})
    for p in prompts:
        assert all(0 <= i < VOCAB_SIZE for i in p["ids"])
    return prompts


@torch.no_grad()
def min_router_margin(model, prompts, greedys) -> float:
    """Smallest gap between the k-th and (k+1)-th router logit over every token of every
    forward made for the golden data (prompt + greedy continuation covers all prefixes),
    so that an independent implementation cannot pick a different expert set."""
    k = model.config.num_experts_per_tok
    gaps = []

    def hook(_mod, _inp, out):
        logits = out[0].float()
        top = torch.topk(logits, k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    handles = [
        m.register_forward_hook(hook) for m in model.modules() if type(m).__name__.endswith("TopKRouter")
    ]
    assert handles
    try:
        for p, g in zip(prompts, greedys):
            model(input_ids=torch.tensor([p["ids"] + g[:-1]]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return min(gaps)


def _softmax_choice_gaps(mod, out) -> torch.Tensor:
    """Qwen3-MoE / Qwen3-Next: the k-th vs (k+1)-th router logit in f32. transformers takes the top
    k of the softmax probabilities, whose order is the logits' order; rounding moves the logits,
    and the probabilities' gap shrinks with their size (a 0.2 logit gap between two experts of
    probability 0.02 is a 0.004 probability gap), so the logit gap is the one that says whether a
    bf16 run can flip the choice."""
    k = mod.top_k
    top = out[0].float().topk(k + 1, dim=-1)
    assert torch.equal(top.indices[:, :k].sort(-1).values, out[2].sort(-1).values)
    return top.values[:, k - 1] - top.values[:, k]


def _grouped_sigmoid_choice_gaps(mod, out) -> torch.Tensor:
    """GLM-4.5 / DeepSeek V3 / Nemotron-H: choice values sigmoid(logit) + e_score_correction_bias; per token the
    smaller of the topk_group-th vs next group score (sum of a group's two best choice values) and
    the k-th vs (k+1)-th choice value among the kept groups' experts."""
    scores = out[0].float().sigmoid() + mod.e_score_correction_bias.float()
    ng, tg, k = mod.num_group, mod.topk_group, mod.top_k
    grouped = scores.view(-1, ng, scores.shape[-1] // ng)
    gs = grouped.topk(2, dim=-1).values.sum(-1)
    top_g = gs.topk(min(tg + 1, ng), dim=-1)
    mask = torch.zeros_like(gs).scatter_(1, top_g.indices[:, :tg], 1.0).bool()
    kept = grouped.masked_fill(~mask.unsqueeze(-1), float("-inf")).view(scores.shape)
    top = kept.topk(k + 1, dim=-1)
    assert torch.equal(top.indices[:, :k].sort(-1).values, out[2].sort(-1).values)
    gap = top.values[:, k - 1] - top.values[:, k]
    if tg < ng:
        gap = torch.minimum(gap, top_g.values[:, tg - 1] - top_g.values[:, tg])
    return gap


ROUTER_CHOICE_GAPS = {
    "Qwen3MoeTopKRouter": _softmax_choice_gaps,
    "Qwen3NextTopKRouter": _softmax_choice_gaps,
    "GptOssTopKRouter": _softmax_choice_gaps,
    "Glm4MoeTopkRouter": _grouped_sigmoid_choice_gaps,
    "NemotronHTopkRouter": _grouped_sigmoid_choice_gaps,
    "DeepseekV3TopkRouter": _grouped_sigmoid_choice_gaps,
}


@torch.no_grad()
def route_choice_gaps(model, prompts, greedys) -> list[torch.Tensor]:
    """Per prompt, each position's smallest routing choice gap over the MoE layers, from the same
    f32 router inputs and values transformers chooses on, over the forwards of prompt +
    greedy[:-1] (which cover every golden logit and greedy step). The recomputed choice is checked
    against the router's own."""
    gaps, out = [], []

    def hook(mod, _inp, res):
        gaps.append(ROUTER_CHOICE_GAPS[type(mod).__name__](mod, res))

    handles = [m.register_forward_hook(hook) for m in model.modules() if type(m).__name__ in ROUTER_CHOICE_GAPS]
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


def route_exact_positions(model, prompts, greedys, margin: float = ROUTE_MARGIN) -> dict:
    """golden.json's `route_exact_positions`: per prompt, how many leading positions of prompt +
    greedy continuation route with a choice gap of at least ROUTE_MARGIN in every MoE layer. A
    bf16 run can flip a narrower choice, and the causal model's outputs before it cannot depend
    on it, so a bf16 backend is compared on those positions only."""
    exact = [int((g >= margin).long().cumprod(0).sum()) for g in route_choice_gaps(model, prompts, greedys)]
    print(f"  route_exact_positions {exact} (prompt lengths {[len(p['ids']) for p in prompts]})")
    return {"route_exact_positions": exact, "route_margin": margin}


def versions():
    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "tokenizers": tokenizers.__version__,
    }


def check_saved_matches_loaded(saved: dict, loaded: dict) -> None:
    """The f32 model's weights are exactly the upcast saved ones. transformers 5.x keeps
    MoE experts fused in memory (experts.gate_up_proj [E, 2*I, H], experts.down_proj
    [E, H, I]) but saves them per expert (experts.{e}.{gate,up,down}_proj.weight)."""
    used = set()
    for k, w in loaded.items():
        if k in saved:
            assert torch.equal(w, saved[k].float()), k
            used.add(k)
        elif k.endswith("experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            for e in range(w.shape[0]):
                g, u = saved[f"{pre}{e}.gate_proj.weight"], saved[f"{pre}{e}.up_proj.weight"]
                assert torch.equal(w[e], torch.cat([g, u], 0).float()), (k, e)
                used |= {f"{pre}{e}.gate_proj.weight", f"{pre}{e}.up_proj.weight"}
        elif k.endswith("experts.up_proj"):  # experts without a gate (Nemotron-H)
            pre = k[: -len("up_proj")]
            for e in range(w.shape[0]):
                assert torch.equal(w[e], saved[f"{pre}{e}.up_proj.weight"].float()), (k, e)
                used.add(f"{pre}{e}.up_proj.weight")
        elif k.endswith(".gate_up_proj.weight"):  # a dense MLP fused in memory (MiniMax M3)
            pre = k[: -len("gate_up_proj.weight")]
            g, u = saved[f"{pre}gate_proj.weight"], saved[f"{pre}up_proj.weight"]
            assert torch.equal(w, torch.cat([g, u], 0).float()), k
            used |= {f"{pre}gate_proj.weight", f"{pre}up_proj.weight"}
        elif k.endswith("experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(w.shape[0]):
                assert torch.equal(w[e], saved[f"{pre}{e}.down_proj.weight"].float()), (k, e)
                used.add(f"{pre}{e}.down_proj.weight")
        elif k == "lm_head.weight":
            assert "lm_head.weight" not in saved  # tied
            assert torch.equal(w, saved["model.embed_tokens.weight"].float())
        else:
            raise AssertionError(f"loaded weight {k} not in checkpoint")
    assert used == set(saved), set(saved) - used


def build_family(family: str, base_tok: Tokenizer, out_root: Path) -> dict:
    builder, seed, add_bos = FAMILIES[family]
    cls, cfg, save_dtype = builder()
    out = out_root / family
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    fast = TOKENIZER.get(family, tokenizer_for)(base_tok, add_bos)
    prompts = make_prompts(fast, seed, add_bos)

    # Try successive seeds until greedy decoding is well separated (no near-ties that
    # an independent f32 implementation could flip) and not degenerate.
    for attempt in range(ATTEMPTS.get(family, DEFAULT_ATTEMPTS)):
        wseed = seed + attempt
        torch.manual_seed(wseed)
        model = cls(cfg).eval()
        EXTRA_PERTURB.get(family, perturb)(model, family, wseed)
        model = model.to(save_dtype)
        model.generation_config = GenerationConfig(
            bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, do_sample=False
        )
        model.config.dtype = save_dtype
        model.save_pretrained(out)
        fast.save_pretrained(out)
        if family in AFTER_SAVE:
            AFTER_SAVE[family](out, model)
        del model

        ref = LOADER.get(family, AutoModelForCausalLM).from_pretrained(
            out, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
        ).eval()
        ref_w = {k: v.float() for k, v in ref.state_dict().items()}
        rename = LOADED_NAME.get(family, lambda k: k)
        saved = {rename(k): v for k, v in load_file(out / "model.safetensors").items()}
        if family in PRECHECK and not PRECHECK[family](ref, prompts):
            print(f"  {family}: seed {wseed} rejected before greedy decoding")
            continue
        ok = True
        tensors, min_margin, greedys = {}, float("inf"), []
        with torch.no_grad():
            for i, p in enumerate(prompts):
                logits = ref(input_ids=torch.tensor([p["ids"]]), use_cache=False).logits[0].float()
                assert logits.shape == (len(p["ids"]), VOCAB_SIZE)
                g_ids, margins = greedy(ref, p["ids"], N_GREEDY)
                # the same as the last position of the full forward
                assert int(logits[-1].argmax()) == g_ids[0]
                min_margin = min(min_margin, min(margins))
                greedys.append(g_ids)
                if len(set(g_ids)) < 4:
                    ok = False
                tensors[f"logits_{i}"] = logits.contiguous()
                tensors[f"greedy_{i}"] = torch.tensor(g_ids, dtype=torch.int64)
        if min_margin < MIN_GREEDY_MARGIN:
            ok = False
        router_margin = min_router_margin(ref, prompts, greedys) if family == "qwen3_moe" else None
        if router_margin is not None and router_margin < MIN_ROUTER_MARGIN:
            ok = False
        if ok and family in EXTRA_ACCEPT and not EXTRA_ACCEPT[family](ref, prompts, greedys):
            ok = False
        if ok:
            break
        print(f"  {family}: seed {wseed} rejected (min margin {min_margin:.4f}, greedy {greedys})")
    else:
        raise RuntimeError(f"no acceptable seed for {family}")

    # Sanity: the checkpoint on disk has the intended dtype and the f32 model's weights
    # are exactly the upcast of the saved ones.
    for k, v in saved.items():
        assert v.dtype == save_dtype, (k, v.dtype)
    CHECK_SAVED.get(family, check_saved_matches_loaded)(saved, ref_w)

    save_file(tensors, str(out / "golden.safetensors"), metadata={"format": "pt"})
    enc = [{"text": s, "ids": fast(s, add_special_tokens=True)["input_ids"]} for s in ENCODE_STRINGS]
    # The reloaded tokenizer must agree with the one we built.
    re_tok = AutoTokenizer.from_pretrained(out)
    for e in enc:
        assert re_tok(e["text"], add_special_tokens=True)["input_ids"] == e["ids"], e
    extra = GOLDEN_EXTRA[family](ref, prompts, greedys) if family in GOLDEN_EXTRA else {}
    golden = {
        "family": family,
        "weights_seed": wseed,
        "saved_dtype": str(save_dtype).replace("torch.", ""),
        "golden_dtype": "float32",
        "tokenizer_len": len(fast),
        "tokenizer_adds_bos": add_bos,
        "prompts": prompts,
        "greedy": greedys,
        "greedy_min_top2_margin": round(min_margin, 4),
        **({"router_min_topk_margin": round(router_margin, 4)} if router_margin is not None else {}),
        **extra,
        "bf16_rel_err": bf16_errors(family, out, prompts, tensors, extra.get("route_exact_positions")),
        **versions(),
        "encode": enc,
    }
    golden_write(out, golden)
    print(f"{family}: seed {wseed}, tokenizer_len {len(fast)}, min greedy margin {min_margin:.4f}")
    for i, gi in enumerate(greedys):
        print(f"  prompt {i} len {len(prompts[i]['ids'])}: greedy {gi}")
    return golden


@torch.no_grad()
def bf16_errors(family: str, out: Path, prompts: list, logits: dict, exact: list | None) -> list[float]:
    """`bf16_rel_err` (module docs) of the checkpoint in `out` against golden `logits`
    (`logits_{i}`), over each prompt's first `exact[i]` positions (every one without `exact`)."""
    m = LOADER.get(family, AutoModelForCausalLM).from_pretrained(
        out, dtype=torch.bfloat16, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    errs = []
    for i, p in enumerate(prompts):
        ids = p["ids"]
        want = logits[f"logits_{i}"].reshape(len(ids), -1)
        n = len(ids) if exact is None else min(len(ids), exact[i])
        got = m(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
        err = float((got[:n] - want[:n]).abs().max()) if n > 0 else 0.0
        errs.append(round(err / float(want.abs().max()), 4))
    return errs


def bf16_only(family: str, out_root: Path) -> None:
    """Recompute `bf16_rel_err` of `family`'s fixture as written and put it into golden.json
    (before the versions, where build_family writes it)."""
    out = out_root / family
    golden = json.loads((out / "golden.json").read_text())
    errs = bf16_errors(family, out, golden["prompts"], load_file(out / "golden.safetensors"),
                       golden.get("route_exact_positions"))
    rest = {k: v for k, v in golden.items() if k != "bf16_rel_err"}
    items = list(rest.items())
    at = list(rest).index("transformers")
    golden_write(out, dict(items[:at] + [("bf16_rel_err", errs)] + items[at:]))
    print(f"{family}: bf16_rel_err {errs}")


def golden_write(out: Path, golden: dict) -> None:
    (out / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


@torch.no_grad()
def route_only(family: str, out_root: Path) -> None:
    """Recompute `family`'s GOLDEN_EXTRA fields from its fixture as written: reload the checkpoint
    as build_family does, check it still gives the golden logits and greedy tokens, and put the
    fields into golden.json (before the versions, where build_family writes them)."""
    out = out_root / family
    golden = json.loads((out / "golden.json").read_text())
    if family not in GOLDEN_EXTRA:
        print(f"{family}: no GOLDEN_EXTRA, golden.json left as it is")
        return
    if {k: golden[k] for k in versions()} != versions():
        print(f"  {family}: warning: written by {[golden[k] for k in versions()]}, running {versions()}")
    ref = LOADER.get(family, AutoModelForCausalLM).from_pretrained(
        out, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    prompts, greedys = golden["prompts"], golden["greedy"]
    tensors = load_file(out / "golden.safetensors")
    for i, p in enumerate(prompts):
        logits = ref(input_ids=torch.tensor([p["ids"]]), use_cache=False).logits[0].float()
        err = float((logits - tensors[f"logits_{i}"]).abs().max())
        print(f"  {family} prompt {i}: max |logit - golden| {err:.2e}")
        # equal up to CPU kernel differences (<= 1.2e-4 seen, qwen3_next's one-id prompt); the
        # greedy tokens exactly
        assert err <= 1e-3, (family, i, err)
        assert greedy(ref, p["ids"], len(greedys[i]))[0] == greedys[i] == tensors[f"greedy_{i}"].tolist(), (family, i)
    extra = GOLDEN_EXTRA[family](ref, prompts, greedys)
    rest = {k: v for k, v in golden.items() if k not in extra}
    at = list(rest).index("transformers")
    items = list(rest.items())
    golden_write(out, dict(items[:at] + list(extra.items()) + items[at:]))
    print(f"{family}: {extra}")


def main():
    load_family_modules()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "fixtures"))
    ap.add_argument("--families", nargs="*", default=None, help="default: every family")
    ap.add_argument(
        "--route-only",
        action="store_true",
        help="recompute only golden.json's GOLDEN_EXTRA fields (route_exact_positions) of fixtures already in --out",
    )
    ap.add_argument(
        "--bf16-only",
        action="store_true",
        help="recompute only golden.json's bf16_rel_err of fixtures already in --out",
    )
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    out_root = Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    if args.bf16_only:
        for fam in args.families or list(FAMILIES):
            bf16_only(fam, out_root)
        return
    if args.route_only:
        print("versions:", versions())
        for fam in args.families or list(FAMILIES):
            route_only(fam, out_root)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fixture_fp8  # noqa: E402
    import fixture_gemma4_assistant  # noqa: E402
    import fixture_mtp  # noqa: E402
    import fixture_mxfp4  # noqa: E402

    assistants = fixture_gemma4_assistant.ASSISTANT_FIXTURES
    derived = {**fixture_fp8.FP8_FIXTURES, **fixture_mtp.MTP_FIXTURES, **assistants, **fixture_mxfp4.MXFP4_FIXTURES}
    wanted = args.families or list(FAMILIES) + list(derived)
    base_tok = train_tokenizer()
    print("versions:", versions())
    print("tokenizer vocab:", base_tok.get_vocab_size(with_added_tokens=True))
    for fam in wanted:
        if fam not in derived:
            build_family(fam, base_tok, out_root)
    # FP8 fixtures quantize the fixtures written above (scripts/fixture_fp8.py).
    fp8 = [f for f in wanted if f in fixture_fp8.FP8_FIXTURES]
    if fp8:
        fixture_fp8.main(fp8, out_root)
    # MXFP4 fixtures quantize gpt-oss's experts as its release does (scripts/fixture_mxfp4.py).
    mxfp4 = [f for f in wanted if f in fixture_mxfp4.MXFP4_FIXTURES]
    if mxfp4:
        fixture_mxfp4.main(mxfp4, out_root)
    # MTP fixtures append a layer to the fixtures written above (scripts/fixture_mtp.py).
    mtp = [f for f in wanted if f in fixture_mtp.MTP_FIXTURES]
    if mtp:
        fixture_mtp.main(mtp, out_root)
    # Gemma 4 assistants draft for the gemma4 fixtures written above (scripts/fixture_gemma4_assistant.py).
    drafters = [f for f in wanted if f in assistants]
    if drafters:
        fixture_gemma4_assistant.main(drafters, out_root)


if __name__ == "__main__":
    sys.exit(main())
