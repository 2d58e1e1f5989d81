"""Gemma 4 assistant fixtures (`Gemma4AssistantForCausalLM`, `gemma4_assistant`): tiny random
drafters for the gemma4 target fixtures, with reference draft logits from transformers' own
assistant forward.

Each is written as `tests/fixtures/<name>/` beside its target fixture (which must exist):
- gemma4_assistant (target gemma4): lm_head tied to its `model.embed_tokens`;
- gemma4_assistant_ordered (target gemma4_kvshare, whose last non-shared layers of each kind are
  layers 2 and 3): `use_ordered_embeddings` with 16 centroids of 32 tokens, the top 4 kept, and a
  random `token_ordering` permutation.
Both: a 3-layer gemma4_text stack (sliding, sliding, full) of hidden 32 whose layers are all
KV-shared (`num_kv_shared_layers` 3: no K/V projections), query heads of the target's head widths
over the target's KV heads (sliding 2 of 16, full 1 of 32 via `per_layer_config`), its own
sliding window 6 (the target's is 8, so a window read from the wrong config shows), no per-layer
inputs, random `layer_scalar`s; `pre_projection` [32, 2 * 64] and `post_projection` [64, 32]
(`backbone_hidden_size` 64, the target's). Matrices N(0, 0.05^2) (the embedding N(0, 0.5^2) so
the head separates tokens), norms 1 + N(0, 0.1^2); rounded to bfloat16 and saved by
`save_pretrained` (token_ordering stays int64).

`assistant_golden.safetensors` is computed in float32 from the checkpoint as saved, reloaded, as
`SinglePositionMultiTokenCandidateGenerator` drafts after a prefill: for each prompt of n >= 2
ids, the target runs ids[:n-1] (`use_cache=False`, `output_hidden_states`,
`return_shared_kv_states`); the first step feeds `concat(target embed_tokens(ids[n-1]) (scaled),
hidden_states[-1][:, -1])` at position n - 1 with the target's shared K/V and an all-ones
attention mask of n; the second feeds the argmax of the first's logits and the first's
`last_hidden_state` (the post-projected row) the same way. `draft_logits_{i}` is `[2, vocab]`
and `draft_tokens_{i}` the two argmaxes. Seeds are accepted only when every step's top two logits
differ by ARGMAX_MARGIN, so an f32 implementation picks the same tokens.

`assistant_golden.json`'s `bf16_rel_err` is, per prompt and step, the largest |logit - reference|
of the same two steps run by transformers in bfloat16 (target and assistant loaded with
`dtype=torch.bfloat16`; the second step fed the reference's first token), as a fraction of the
step's largest |reference logit|: what a bf16 backend is held to (crates/cuda/tests/assistant.rs).
`--bf16-only` recomputes it alone.

Called by make_fixtures.py (`--families gemma4_assistant gemma4_assistant_ordered`), or alone:
    python3 scripts/fixture_gemma4_assistant.py [--out tests/fixtures] [NAME ...]
    python3 scripts/fixture_gemma4_assistant.py [--out tests/fixtures] --bf16-only [NAME ...]
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Gemma4TextConfig
from transformers.models.gemma4_assistant import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

ARGMAX_MARGIN = 1e-3

# name: (target fixture, use_ordered_embeddings, seed)
ASSISTANT_FIXTURES = {
    "gemma4_assistant": ("gemma4", False, 7101),
    "gemma4_assistant_ordered": ("gemma4_kvshare", True, 7202),
}


def assistant_config(target_cfg, ordered: bool) -> Gemma4AssistantConfig:
    text = Gemma4TextConfig(
        vocab_size=target_cfg.vocab_size,
        vocab_size_per_layer_input=0,
        hidden_size=32,
        hidden_size_per_layer_input=0,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        global_head_dim=32,
        num_global_key_value_heads=1,
        attention_k_eq_v=True,
        hidden_activation="gelu_pytorch_tanh",
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        sliding_window=6,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
        num_kv_shared_layers=3,
        enable_moe_block=False,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return Gemma4AssistantConfig(
        text_config=text,
        backbone_hidden_size=target_cfg.hidden_size,
        use_ordered_embeddings=ordered,
        num_centroids=16,
        centroid_intermediate_top_k=4,
        tie_word_embeddings=True,
    )


@torch.no_grad()
def random_assistant(cfg: Gemma4AssistantConfig, seed: int) -> Gemma4AssistantForCausalLM:
    g = torch.Generator().manual_seed(seed)
    model = Gemma4AssistantForCausalLM(cfg).float().eval()
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if p.dim() == 1:
            v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
        elif name == "model.embed_tokens.weight":
            v = 0.5 * torch.randn(p.shape, generator=g)
        else:
            v = 0.05 * torch.randn(p.shape, generator=g)
        p.copy_(v.to(torch.bfloat16).float())
    for name, b in sorted(model.named_buffers(), key=lambda kv: kv[0]):
        if name.endswith("layer_scalar"):
            b.copy_((0.5 + torch.rand(b.shape, generator=g)).to(torch.bfloat16).float())
        elif name.endswith("token_ordering"):
            b.copy_(torch.randperm(b.shape[0], generator=g))
    return model


@torch.no_grad()
def draft_two(target, assistant, ids: list[int], feed: int | None = None):
    """The two draft steps after a prefill of ids[:-1] with ids[-1] the last token (docstring);
    the second fed `feed` where given, else the first's argmax."""
    n = len(ids)
    out = target(
        input_ids=torch.tensor([ids[:-1]]),
        use_cache=False,
        output_hidden_states=True,
        return_shared_kv_states=True,
    )
    shared = out.shared_kv_states
    hidden = out.hidden_states[-1][:, -1:]
    token = torch.tensor([[ids[-1]]])
    position = torch.tensor([[n - 1]])
    mask = torch.ones(1, n, dtype=torch.long)
    embed = target.get_input_embeddings()
    logits, tokens = [], []
    for _ in range(2):
        a = assistant(
            inputs_embeds=torch.cat([embed(token), hidden], dim=-1),
            attention_mask=mask,
            position_ids=position,
            shared_kv_states=shared,
            use_cache=False,
        )
        row = a.logits[0, -1]
        logits.append(row)
        token = row.argmax().view(1, 1)
        tokens.append(int(token))
        if feed is not None:
            token = torch.tensor([[feed]])
        hidden = a.last_hidden_state
    return torch.stack(logits), tokens


def margin(rows: torch.Tensor) -> float:
    top = rows.topk(2, dim=-1).values
    return float((top[:, 0] - top[:, 1]).min())


def build(name: str, out_root: Path) -> None:
    source, ordered, seed = ASSISTANT_FIXTURES[name]
    src, out = out_root / source, out_root / name
    golden = json.loads((src / "golden.json").read_text())
    target = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    cfg = assistant_config(target.config, ordered)
    # The golden prompts of two or more ids, and the first three ids of the longest (a context
    # inside every sliding window).
    prompts = [p["ids"] for p in golden["prompts"] if len(p["ids"]) >= 2]
    prompts.append(max(prompts, key=len)[:3])
    for attempt in range(50):
        s = seed + 1000 * attempt
        if out.exists():
            shutil.rmtree(out)
        random_assistant(cfg, s).to(torch.bfloat16).save_pretrained(out)
        assistant = Gemma4AssistantForCausalLM.from_pretrained(
            out, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        results = [draft_two(target, assistant, ids) for ids in prompts]
        worst = min(margin(r[0]) for r in results)
        if worst >= ARGMAX_MARGIN:
            break
    else:
        raise SystemExit(f"{name}: no seed separates every draft step's top two logits by {ARGMAX_MARGIN}")
    tensors = {}
    for i, (logits, tokens) in enumerate(results):
        tensors[f"draft_logits_{i}"] = logits.contiguous()
        tensors[f"draft_tokens_{i}"] = torch.tensor(tokens, dtype=torch.int64)
    save_file(tensors, str(out / "assistant_golden.safetensors"), metadata={"format": "pt"})
    (out / "assistant_golden.json").write_text(
        json.dumps({"target": source, "prompts": prompts, "seed": s}, indent=2) + "\n"
    )
    bf16_only(name, out_root)
    for f in out.iterdir():
        f.chmod(0o644)
    print(f"{name}: target {source}, ordered {ordered}, seed {s}, min top-2 margin {worst:.4f}")


def bf16_only(name: str, out_root: Path) -> None:
    """Writes `bf16_rel_err` (module docs) into `name`'s assistant_golden.json."""
    source = ASSISTANT_FIXTURES[name][0]
    out = out_root / name
    meta = json.loads((out / "assistant_golden.json").read_text())
    want = load_file(out / "assistant_golden.safetensors")
    target = AutoModelForCausalLM.from_pretrained(
        out_root / source, dtype=torch.bfloat16, attn_implementation="eager"
    ).eval()
    assistant = Gemma4AssistantForCausalLM.from_pretrained(out, dtype=torch.bfloat16, attn_implementation="eager").eval()
    errs = []
    for i, ids in enumerate(meta["prompts"]):
        ref = want[f"draft_logits_{i}"]
        got, _ = draft_two(target, assistant, ids, int(want[f"draft_tokens_{i}"][0]))
        errs.append([round(float((got[j].float() - ref[j]).abs().max() / ref[j].abs().max()), 4) for j in range(2)])
    meta["bf16_rel_err"] = errs
    (out / "assistant_golden.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"{name}: bf16_rel_err {errs}")


def main(names: list[str] | None, out_root: Path) -> None:
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in names or list(ASSISTANT_FIXTURES):
        build(name, out_root)


if __name__ == "__main__":
    args = sys.argv[1:]
    root = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
    if args[:1] == ["--out"]:
        root, args = Path(args[1]), args[2:]
    if args[:1] == ["--bf16-only"]:
        for n in args[1:] or list(ASSISTANT_FIXTURES):
            bf16_only(n, root)
    else:
        main(args or None, root)
