#!/usr/bin/env python3
"""Usage: peer_hf.py --model DIR --runs 128x1,128x64 --gen-len 128 --repeat 1 --json OUT.json

Peer run for `tensorfold bench`: transformers + PyTorch on the same checkpoint, bf16, static
KV cache, greedy, fixed-length generation. Prints one line per (prompt, batch) and writes JSON.

Decode time per round = (time of generate(N) - time of generate(1)) / (N - 1), each the median of
--repeat runs after a warm-up; prefill time = time of generate(1) (prompt forward + one token).
"""
import argparse
import json
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def timed(fn, repeat):
    fn()  # warm-up (also builds the static cache)
    out = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", default="128x1,4096x1,128x64", help="prompt_len x batch, comma-separated")
    ap.add_argument("--gen-len", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward (slow to start)")
    ap.add_argument("--json")
    a = ap.parse_args()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda")
    model.eval()
    if a.compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    vocab = model.config.vocab_size
    results = []
    print(f"peer: transformers on {torch.cuda.get_device_name()} torch {torch.__version__} compile={a.compile}")
    for run in a.runs.split(","):
        plen, batch = (int(x) for x in run.split("x"))
        ids = torch.tensor([[(i * 7919 + 13) % vocab for i in range(plen)]] * batch, device="cuda")
        mask = torch.ones_like(ids)

        def gen(n):
            with torch.inference_mode():
                return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                      do_sample=False, cache_implementation="static", pad_token_id=0)

        t1 = timed(lambda: gen(1), a.repeat)
        tn = timed(lambda: gen(a.gen_len), a.repeat)
        round_s = (tn - t1) / (a.gen_len - 1)
        r = {"prompt_len": plen, "batch": batch, "gen_len": a.gen_len, "ttft_ms": t1 * 1e3,
             "prefill_tok_s": plen * batch / t1, "decode_round_ms": round_s * 1e3, "decode_tok_s": batch / round_s,
             "compile": a.compile}
        results.append(r)
        print(f"peer prompt {plen:>5} batch {batch:>3} | prefill {r['prefill_tok_s']:>9.1f} tok/s ttft {t1*1e3:>8.1f} ms"
              f" | decode {r['decode_tok_s']:>9.1f} tok/s {round_s*1e3:>7.3f} ms/round", flush=True)
        if a.json:  # after every run, so a time limit keeps what finished
            with open(a.json, "w") as f:
                json.dump({"peer": "transformers", "torch": torch.__version__, "results": results}, f)


if __name__ == "__main__":
    main()
