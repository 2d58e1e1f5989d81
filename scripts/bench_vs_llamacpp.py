#!/usr/bin/env python3
"""Benchmark (not a test): TensorFold vs llama.cpp on this CPU, same GGUF, same threads.

Both sides get the same prompt tokens (TensorFold's `bench` prompt: ids
`(i * 7919 + 13) % n_vocab` for i in 0..N, no BOS), prefill them as one batch, then decode
`--gen-tokens` single tokens greedily (argmax; EOS ignored). The two alternate, `--rounds`
times (llama.cpp, TensorFold, llama.cpp, ...), each round `--repeat` repetitions, so that other
load on the machine falls on both alike; each round's medians give that round's ratio, and the
medians over rounds are reported beside every round's figures.

llama.cpp is llama-cpp-python's bundled llama.cpp, built the way a user builds it for this
CPU: `--install` makes a virtual environment (`--venv`, default
~/.cache/tensorfold/llamacpp-venv) and runs `pip install llama-cpp-python==VERSION` from
source there with `CMAKE_ARGS` (`--cmake-args`, default `-DGGML_NATIVE=ON`: every instruction
set of this CPU), then runs this script again inside it. Its figures come from its own
timings: `llama_perf_context` after each repetition (t_p_eval_ms / n_p_eval for the
prompt batch, t_eval_ms / n_eval for the single-token decodes); that is the time inside
llama_decode, without Python, the logits copy or the argmax. Wall-clock figures measured
around `Llama.eval` from Python (argmax included, like TensorFold's own bench loop) are
reported too. The ratios use llama.cpp's own timings (the stricter peer). llama.cpp keeps
its default extra buffer types (weights repacked for the CPU, AMX tiles where built);
`--llama-no-extra-bufts` turns them off, for a build whose AMX path faults on a machine that
does not grant the tiles (some VMs).

TensorFold: `target/release/tensorfold bench --model FILE.gguf --prompt-len N --gen-len M
--threads T --repeat R --json OUT` (its medians). If the binary is missing or fails,
that is printed and llama.cpp's figures are still reported.

Usage:
  python3 scripts/bench_vs_llamacpp.py [--install] [--model PATH.gguf] [--threads T]
      [--prompt-tokens 128] [--gen-tokens 64] [--repeat 3] [--rounds 3] [--skip-tensorfold]
      [--bin target/release/tensorfold] [--kv-cache-dtype f16|bf16|f32|q8_0|q4_0] [--flash-attn]
      [--llama-no-extra-bufts] [--out results.json]
Both sides keep the KV cache `--kv-cache-dtype` names (default f16, llama.cpp's default).
Without --model it runs scripts/fetch_gemma3_gguf.sh (cache ~/.cache/tensorfold/models/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "gemma-3-270m-q4_k_m.gguf"


def log(msg: str) -> None:
    print(f"bench_vs_llamacpp: {msg}", file=sys.stderr, flush=True)


def find_model(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    fetch = REPO / "scripts" / "fetch_gemma3_gguf.sh"
    if fetch.exists():
        try:
            out = subprocess.run(["bash", str(fetch)], check=True, capture_output=True, text=True)
            return Path(out.stdout.strip().splitlines()[-1])
        except subprocess.CalledProcessError as e:
            log(f"{fetch.name} failed ({e.returncode}): {e.stderr.strip()[-500:]}")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tensorfold" / "models"
    return cache / NAME


def bench_prompt(n: int, vocab: int) -> list[int]:
    """The prompt TensorFold's `bench` uses (crates/cli/src/bench.rs)."""
    return [(i * 7919 + 13) % vocab for i in range(n)]


def spread(v: list[float]) -> dict:
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "all": v}


def machine_info() -> dict:
    cpu, flags = None, set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu is None:
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gb = None
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "simd": sorted(f for f in flags if f in ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile")),
        "mem_gb": round(mem_gb, 1) if mem_gb else None,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def git_commit() -> dict:
    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


# ---------------------------------------------------------------- llama.cpp


LLAMA_VERSION = "0.3.36"


def install_llamacpp(venv: Path, cmake_args: str) -> Path:
    """llama-cpp-python built from source in `venv` with `cmake_args`; its python."""
    py = venv / "bin" / "python"
    if not py.exists():
        log(f"making a virtual environment in {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    log(f"building llama-cpp-python {LLAMA_VERSION} from source with CMAKE_ARGS='{cmake_args}' (minutes)")
    env = {**os.environ, "CMAKE_ARGS": cmake_args, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}
    subprocess.run([str(py), "-m", "pip", "install", "--no-binary", "llama-cpp-python", f"llama-cpp-python=={LLAMA_VERSION}"],
                   check=True, env=env)
    return py


# llama.cpp's ggml_type of each --kv-cache-dtype value (a quantized V cache needs its
# --flash-attn).
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}


def open_llamacpp(model: Path, threads: int, n_prompt: int, n_gen: int, flash_attn: bool, extra_bufts: bool,
                  kv: str):
    """llama.cpp loaded and warmed up: (its description, a function running one round), or an error."""
    try:
        import llama_cpp
        import numpy as np
    except ImportError as e:
        log(f"llama-cpp-python is not installed ({e}): run with --install")
        return {"error": f"not installed: {e}"}, None
    version = llama_cpp.__version__
    log(f"llama-cpp-python {version}")
    system_info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    log(f"llama.cpp system info: {system_info}")
    if not extra_bufts:
        default_params = llama_cpp.llama_model_default_params

        def params():
            p = default_params()
            p.use_extra_bufts = False
            return p

        llama_cpp.llama_model_default_params = params
        llama_cpp.llama_cpp.llama_model_default_params = params

    n_batch = max(512, n_prompt)  # the whole prompt in one batch / ubatch
    llm = llama_cpp.Llama(
        model_path=str(model),
        n_ctx=n_prompt + n_gen + 8,
        n_batch=n_batch,
        n_ubatch=n_batch,
        n_threads=threads,
        n_threads_batch=threads,
        flash_attn=flash_attn,
        type_k=GGML_TYPES[kv],
        type_v=GGML_TYPES[kv],
        logits_all=False,
        verbose=False,
        seed=0,
    )
    ctx = llm._ctx.ctx
    vocab = llm.n_vocab()
    prompt = bench_prompt(n_prompt, vocab)

    def last_logits():
        ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(vocab,))

    def one(n_p: int, n_g: int) -> dict:
        llm.reset()
        llama_cpp.llama_perf_context_reset(ctx)
        t0 = time.perf_counter()
        llm.eval(prompt[:n_p])
        tok = int(np.argmax(last_logits()))
        t1 = time.perf_counter()
        for _ in range(n_g):
            llm.eval([tok])
            tok = int(np.argmax(last_logits()))
        t2 = time.perf_counter()
        perf = llama_cpp.llama_perf_context(ctx)
        if perf.n_p_eval != n_p or perf.n_eval != n_g:
            log(f"warning: llama.cpp counted {perf.n_p_eval} prompt / {perf.n_eval} decode tokens, expected {n_p} / {n_g}")
        return {
            "prefill_tok_s": perf.n_p_eval / (perf.t_p_eval_ms / 1e3),
            "decode_tok_s": perf.n_eval / (perf.t_eval_ms / 1e3),
            "wall_prefill_tok_s": n_p / (t1 - t0),
            "wall_decode_tok_s": n_g / (t2 - t1),
            "wall_ttft_ms": (t1 - t0) * 1e3,
            "n_p_eval": perf.n_p_eval,
            "n_eval": perf.n_eval,
        }

    one(min(16, n_prompt), 4)  # warm-up (page in the weights, allocate buffers)
    keys = ["prefill_tok_s", "decode_tok_s", "wall_prefill_tok_s", "wall_decode_tok_s", "wall_ttft_ms"]

    def round_(repeat: int) -> dict:
        reps = []
        for r in range(repeat):
            reps.append(one(n_prompt, n_gen))
            x = reps[-1]
            log(
                f"llama.cpp rep {r + 1}/{repeat}: prefill {x['prefill_tok_s']:.1f} tok/s, decode "
                f"{x['decode_tok_s']:.2f} tok/s (wall {x['wall_prefill_tok_s']:.1f} / {x['wall_decode_tok_s']:.2f})"
            )
        return {k: spread([x[k] for x in reps]) for k in keys}

    about = {
        "version": version,
        "system_info": system_info,
        "settings": {"n_batch": n_batch, "n_ubatch": n_batch, "flash_attn": flash_attn, "kv_cache": kv,
                     "extra_bufts": extra_bufts},
        "timing": "llama_perf_context (inside llama_decode); wall_* = Python clock around Llama.eval + argmax",
    }
    return about, round_


# ---------------------------------------------------------------- TensorFold


def run_tensorfold(binary: Path, model: Path, threads: int, n_prompt: int, n_gen: int, repeat: int, timeout: float,
                   kv: str) -> dict:
    if not binary.exists():
        return {"error": f"binary {binary} not found (build it with cargo build --release)"}
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / "tf.json"
        cmd = [str(binary), "bench", "--model", str(model), "--prompt-len", str(n_prompt), "--gen-len", str(n_gen),
               "--threads", str(threads), "--repeat", str(repeat), "--kv-cache-dtype", kv, "--json", str(out)]
        log("running " + " ".join(cmd))
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f}s", "cmd": cmd}
        wall = time.perf_counter() - t0
        if p.stdout.strip():
            print(p.stdout.rstrip(), file=sys.stderr)
        if p.returncode != 0 or not out.exists():
            return {"error": f"exit {p.returncode}", "stderr_tail": p.stderr.strip()[-2000:], "cmd": cmd}
        doc = json.loads(out.read_text())
    rows = [r for r in doc.get("results", []) if r.get("prompt_len") == n_prompt] or doc.get("results", [])
    if not rows:
        return {"error": "no results in its JSON", "json": doc}
    r = rows[0]
    return {
        "prefill_tok_s": r["prefill_tok_s"],
        "decode_tok_s": r["decode_tok_s"],
        "ttft_ms": r.get("ttft_ms"),
        "timing": f"tensorfold bench: median of {repeat} repetitions, wall clock inside the binary (argmax included)",
        "backend": doc.get("backend"),
        "threads_reported": doc.get("threads"),
        "architecture": doc.get("architecture"),
        "process_wall_s": wall,
        "cmd": cmd,
    }


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF file (default: scripts/fetch_gemma3_gguf.sh / cache)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both (default: all cores)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="repetitions in a round (its medians)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of each side")
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "tensorfold"), help="tensorfold binary")
    ap.add_argument("--skip-tensorfold", action="store_true", help="llama.cpp only")
    ap.add_argument("--skip-llamacpp", action="store_true", help="TensorFold only")
    ap.add_argument("--kv-cache-dtype", choices=sorted(GGML_TYPES), default="f16",
                    help="what both sides' KV caches hold (default f16: llama.cpp's default)")
    ap.add_argument("--flash-attn", action="store_true", help="llama.cpp flash attention on (llama-cpp-python default: off)")
    ap.add_argument("--llama-no-extra-bufts", action="store_true",
                    help="llama.cpp without its extra buffer types (repacked weights, AMX)")
    ap.add_argument("--install", action="store_true", help="build llama-cpp-python from source into --venv first")
    ap.add_argument("--venv", default=str(Path.home() / ".cache" / "tensorfold" / "llamacpp-venv"))
    ap.add_argument("--cmake-args", default="-DGGML_NATIVE=ON", help="CMAKE_ARGS of that build")
    ap.add_argument("--tf-timeout", type=float, default=1800, help="seconds allowed for each tensorfold run")
    ap.add_argument("--out", help="results JSON (default: target/bench/llamacpp_<time>.json, git-ignored)")
    args = ap.parse_args()

    if args.install:
        py = install_llamacpp(Path(args.venv), args.cmake_args)
        rest = [a for a in sys.argv[1:] if a != "--install"]
        os.execv(str(py), [str(py), str(Path(__file__).resolve()), *rest])

    model = find_model(args.model)
    if not model.exists():
        log(f"model not found: {model}")
        return 1
    info = machine_info()
    log(f"model {model} | {info['cpu']} | {info['logical_cpus']} logical cpus | simd {' '.join(info['simd'])}")
    log(f"threads {args.threads}, prompt {args.prompt_tokens} tokens, gen {args.gen_tokens} tokens, "
        f"{args.rounds} rounds of {args.repeat}")
    load_before = loadavg()
    if load_before and info["logical_cpus"] and load_before[0] > 0.5 * info["logical_cpus"]:
        log(f"warning: load average {load_before} on {info['logical_cpus']} cpus: other work competes, figures are noisy")

    theirs, llama_round = ({"error": "skipped"}, None) if args.skip_llamacpp else open_llamacpp(
        model, args.threads, args.prompt_tokens, args.gen_tokens, args.flash_attn, not args.llama_no_extra_bufts,
        args.kv_cache_dtype,
    )
    ours: dict = {"error": "skipped (--skip-tensorfold)"} if args.skip_tensorfold else {}
    rounds = []
    for n in range(args.rounds):
        log(f"round {n + 1}/{args.rounds}")
        r = {"llamacpp": llama_round(args.repeat) if llama_round else None, "tensorfold": None}
        if not args.skip_tensorfold:
            tf = run_tensorfold(Path(args.bin), model, args.threads, args.prompt_tokens, args.gen_tokens, args.repeat,
                                args.tf_timeout, args.kv_cache_dtype)
            if "error" in tf:
                log(f"TensorFold did not run: {tf['error']}")
                if tf.get("stderr_tail"):
                    log("its stderr ends with:\n" + tf["stderr_tail"])
                ours = tf
            else:
                r["tensorfold"] = tf
        rounds.append(r)
    if llama_round:
        theirs["rounds"] = [r["llamacpp"] for r in rounds]
        for k in ("prefill_tok_s", "decode_tok_s", "wall_prefill_tok_s", "wall_decode_tok_s", "wall_ttft_ms"):
            theirs[k] = spread([r["llamacpp"][k]["median"] for r in rounds])
    tf_rounds = [r["tensorfold"] for r in rounds if r["tensorfold"]]
    if tf_rounds and "error" not in ours:
        ours = {**{k: v for k, v in tf_rounds[-1].items() if k not in ("prefill_tok_s", "decode_tok_s", "ttft_ms")},
                "rounds": tf_rounds,
                **{k: spread([t[k] for t in tf_rounds]) for k in ("prefill_tok_s", "decode_tok_s")}}

    def fig(side: dict | None, key: str):
        v = (side or {}).get(key)
        return v["median"] if isinstance(v, dict) else v

    per_round = []
    for r in rounds:
        per_round.append({k: (fig(r["tensorfold"], k) / fig(r["llamacpp"], k)
                              if fig(r["tensorfold"], k) and fig(r["llamacpp"], k) else None)
                          for k in ("prefill_tok_s", "decode_tok_s")})
    ratios = {}
    for k in ("prefill_tok_s", "decode_tok_s"):
        a, b = fig(ours, k), fig(theirs, k)
        ratios[k] = a / b if a and b else None

    results = {
        "bench": "tensorfold_vs_llamacpp_cpu",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **git_commit(),
        "machine": info,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "model": {"file": model.name, "path": str(model), "bytes": model.stat().st_size},
        "threads": args.threads,
        "prompt_tokens": args.prompt_tokens,
        "gen_tokens": args.gen_tokens,
        "repeat": args.repeat,
        "rounds": args.rounds,
        "prompt": "ids (i * 7919 + 13) % n_vocab, i in 0..prompt_tokens, no BOS (TensorFold bench's prompt)",
        "llamacpp": theirs,
        "tensorfold": ours,
        "ratios_per_round": per_round,
        "ratios_ours_over_theirs": ratios,
    }
    out = Path(args.out) if args.out else REPO / "target" / "bench" / f"llamacpp_{time.strftime('%Y%m%d_%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    log(f"wrote {out}")

    def cell(v, fmt):
        width = int("".join(c for c in fmt.split(".")[0] if c.isdigit()) or 0)
        return format(v, fmt) if isinstance(v, (int, float)) else "-".rjust(width)

    print()
    print(f"{model.name}: threads {args.threads}, prompt {args.prompt_tokens}, gen {args.gen_tokens}, "
          f"{args.rounds} alternating rounds of {args.repeat}; commit {(results['commit'] or '?')[:12]}"
          f"{' (dirty)' if results['dirty'] else ''}; loadavg {load_before} -> {results['loadavg_after']}")
    lv = theirs.get("version", "")
    extra = "" if not llama_round or not args.llama_no_extra_bufts else ", no extra bufts"
    print(f"{'round':>5} {'llama.cpp prefill':>18} {'ours':>9} {'ratio':>6} {'llama.cpp decode':>17} {'ours':>9} {'ratio':>6}")
    for n, (r, q) in enumerate(zip(rounds, per_round)):
        print(f"{n + 1:>5} {cell(fig(r['llamacpp'], 'prefill_tok_s'), '18.1f')} {cell(fig(r['tensorfold'], 'prefill_tok_s'), '9.1f')} "
              f"{cell(q['prefill_tok_s'], '6.3f')} {cell(fig(r['llamacpp'], 'decode_tok_s'), '17.2f')} "
              f"{cell(fig(r['tensorfold'], 'decode_tok_s'), '9.2f')} {cell(q['decode_tok_s'], '6.3f')}")
    print(f"{'':28} {'prefill tok/s':>14} {'decode tok/s':>14}   (medians over rounds)")
    print(f"{'llama.cpp ' + lv + extra:28} {cell(fig(theirs, 'prefill_tok_s'), '14.1f')} {cell(fig(theirs, 'decode_tok_s'), '14.2f')}")
    print(f"{'  (wall clock from Python)':28} {cell(fig(theirs, 'wall_prefill_tok_s'), '14.1f')} "
          f"{cell(fig(theirs, 'wall_decode_tok_s'), '14.2f')}")
    if "error" in ours:
        print(f"{'TensorFold':28} {'not run: ' + ours['error'][:60]}")
    else:
        print(f"{'TensorFold ' + str(ours.get('backend') or ''):28} {cell(fig(ours, 'prefill_tok_s'), '14.1f')} "
              f"{cell(fig(ours, 'decode_tok_s'), '14.2f')}")
    print(f"{'ours / theirs':28} {cell(ratios['prefill_tok_s'], '14.3f')} {cell(ratios['decode_tok_s'], '14.3f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
