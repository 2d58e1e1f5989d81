#!/usr/bin/env python3
"""Load benchmark (not a test) for `tensorfold serve`: for 1, 8 and 32 concurrent streaming
clients, prints requests/s, tokens/s, p50/p99 time to first token and p50/p99 inter-token latency.

Bounded: at most --requests requests and --time-limit seconds per concurrency level. Talks to a
running server (--url), or starts one on --model with the release binary and stops it after.
Only loopback addresses are accepted. Standard library only.

  target/release/tensorfold synth --like qwen3-0.6b --layers 4 --out /tmp/q06
  scripts/bench_serve.py --model /tmp/q06
"""

import argparse
import http.client
import json
import os
import pathlib
import random
import signal
import subprocess
import threading
import time
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[1]


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def one_request(host, port, body, timeout):
    """Streams one completion; returns (ttft, inter-token gaps, tokens) or raises."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    stamps = []
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for c in chunk.get("choices", []):
            lp = c.get("logprobs") or {}
            stamps.extend([time.perf_counter()] * len(lp.get("tokens") or []))
    conn.close()
    if not stamps:
        raise RuntimeError("no tokens")
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return stamps[0] - t0, gaps, len(stamps)


def run_level(args, host, port, clients):
    """`clients` workers share a budget of --requests requests and --time-limit seconds."""
    lock = threading.Lock()
    state = {"next": 0, "ttft": [], "gaps": [], "tokens": 0, "done": 0, "errors": 0}
    deadline = time.perf_counter() + args.time_limit

    def worker():
        while time.perf_counter() < deadline:
            with lock:
                if state["next"] >= args.requests:
                    return
                i = state["next"]
                state["next"] += 1
            rng = random.Random(i)
            prompt = [rng.randrange(10, args.vocab_hint) for _ in range(args.prompt_len)]
            body = {"prompt": prompt, "max_tokens": args.max_tokens, "stream": True, "ignore_eos": True,
                    "temperature": args.temperature, "seed": i, "logprobs": args.logprobs}
            body.update({k: v for k, v in (("top_p", args.top_p), ("top_k", args.top_k)) if v is not None})
            try:
                ttft, gaps, n = one_request(host, port, body, timeout=max(1.0, deadline - time.perf_counter() + 30))
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    state["errors"] += 1
                print(f"  request {i}: {e}")
                continue
            with lock:
                state["ttft"].append(ttft)
                state["gaps"].extend(gaps)
                state["tokens"] += n
                state["done"] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ms = lambda s: s * 1000  # noqa: E731
    print(f"{clients:>7} {state['done']:>8} {state['errors']:>6} {state['done'] / wall:>9.2f} "
          f"{state['tokens'] / wall:>9.1f} {ms(percentile(state['ttft'], 50)):>9.1f} {ms(percentile(state['ttft'], 99)):>9.1f} "
          f"{ms(percentile(state['gaps'], 50)):>8.1f} {ms(percentile(state['gaps'], 99)):>8.1f} {wall:>7.1f}")


def start_server(args):
    binary = pathlib.Path(args.binary or ROOT / "target" / "release" / "tensorfold")
    cmd = [str(binary), "serve", "--model", args.model, "--port", "0", "--kv-memory", args.kv_memory]
    cmd += args.server_args
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("listening on "):
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, line.split()[-1]
    proc.wait()
    raise SystemExit(f"the server exited with {proc.returncode} before listening")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", help="start `tensorfold serve` on this checkpoint instead")
    ap.add_argument("--binary", help="tensorfold binary for --model (default: target/release/tensorfold)")
    ap.add_argument("--kv-memory", default="2GiB")
    ap.add_argument("--server-args", nargs=argparse.REMAINDER, default=[], help="more serve switches (last)")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--requests", type=int, default=64, help="requests per concurrency level at most")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per concurrency level at most")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--vocab-hint", type=int, default=30000, help="prompt ids are drawn below this")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=None, help="sent when given")
    ap.add_argument("--top-k", type=int, default=None, help="sent when given (a vLLM extension)")
    ap.add_argument("--logprobs", type=int, default=0,
                    help="alternatives asked for a token (tokens are counted by their logprobs entries)")
    args = ap.parse_args()
    if not args.url and not args.model:
        ap.error("give --url or --model")
    proc = None
    if args.model:
        proc, args.url = start_server(args)
    url = urllib.parse.urlparse(args.url)
    if url.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("only loopback servers are benchmarked")
    try:
        print(f"server {args.url}; prompt {args.prompt_len} tokens, {args.max_tokens} generated, "
              f"<= {args.requests} requests and <= {args.time_limit:.0f} s per level")
        print("clients requests errors    req/s    tok/s  ttft p50  ttft p99  itl p50  itl p99  wall s")
        for c in [int(x) for x in args.concurrency.split(",")]:
            run_level(args, url.hostname, url.port or 80, c)
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
