"""Prompt logprobs through the official `openai` client: `echo=True` with `logprobs` scores the
prompt (legacy shape: the prompt's tokens first, `None` for the first), with `max_tokens=0` or 1,
and vLLM's `prompt_logprobs` through `extra_body`; a fresh server and one whose prefix cache
holds the prompt answer the same."""

import shutil

import openai

from conftest import CHATML, ROOT, start_server, stop_server

PROMPT = "the quick brown fox jumps over the lazy dog " * 6


def score(client, max_tokens):
    return client.completions.create(model="tiny", prompt=PROMPT, echo=True, logprobs=1, max_tokens=max_tokens,
                                     temperature=0, extra_body={"prompt_logprobs": 2, "ignore_eos": True})


def test_echo_logprobs_cold_and_warm_agree(client, tmp_path):
    zero = score(client, 0)
    c = zero.choices[0]
    assert c.text == PROMPT
    assert zero.usage.completion_tokens == 0
    lp = c.logprobs
    n = zero.usage.prompt_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x <= 0 for x in lp.token_logprobs[1:])
    assert lp.text_offset[0] == 0
    pl = c.model_extra["prompt_logprobs"]
    assert len(pl) == n and pl[0] is None
    assert all(min(e["rank"] for e in pos.values()) == 1 for pos in pl[1:])
    one = score(client, 1)
    assert one.choices[0].logprobs.token_logprobs[:n] == lp.token_logprobs
    assert len(one.choices[0].logprobs.tokens) == n + 1
    # The prompt is now in the prefix cache of this server; a fresh one has nothing cached.
    fresh_proc, fresh_url = start_server(["--model", model_dir(tmp_path), "--threads", "1", "--kv-memory", "4MiB",
                                          "--served-model-name", "tiny"])
    try:
        fresh = openai.OpenAI(base_url=fresh_url + "/v1", api_key="unused", max_retries=0, timeout=60)
        cold = score(fresh, 0)
    finally:
        stop_server(fresh_proc)
    warm = score(client, 0)
    assert cold.choices[0].logprobs == warm.choices[0].logprobs == lp
    assert cold.choices[0].model_extra["prompt_logprobs"] == warm.choices[0].model_extra["prompt_logprobs"]


def model_dir(d):
    """The qwen3 fixture with ChatML in `d`, as the session's server serves it."""
    for f in (ROOT / "tests" / "fixtures" / "qwen3").iterdir():
        if not f.name.startswith("golden"):
            shutil.copy(f, d / f.name)
    (d / "chat_template.jinja").write_text(CHATML)
    return d
