//! `tensorfold bench`: prefill and batched decode speed on a checkpoint, and on a GPU the ratios
//! of BENCH.md against the card's copy bandwidth and bf16 GEMM peak measured in the same run.
//!
//! Batched decode runs `batch` sequences through one forward per round (vLLM-style paged rows).
//! They share the prompt's full KV blocks (prefix sharing: one prefill, as a prefix cache would
//! give) and own their tail and generated blocks. Each round computes every row's logits; the
//! next token of all rows is row 0's, picked as `--sample` says (bench_pick.rs): by default the
//! argmax, taken on the device where the backend can. Greedy rounds overlap as the engine's do
//! (engine/overlap.rs): round N + 1 is queued on round N's ids where the backend holds them,
//! before they reach the host (`--sample greedy-sync` waits for each round's ids instead). A
//! mode measured after `greedy` at the same prompt and batch also gets its decode speed over
//! greedy's in that run (`ratio_to_greedy`).

use crate::args::BenchArgs;
use crate::bench_cost::Cost;
use crate::bench_pick::{PickMode, Picker};
use crate::device::{Limits, OnBackend, cublas_rounds, dispatch, limits, threads};
use crate::exit::{Failure, failed, refused};
use serde_json::{Value, json};
use std::time::Instant;
use tf_backend::{AttnMeta, Backend, SeqAttn};
use tf_engine::sampler::SamplingParams;
use tf_models::tp::GroupShape;
use tf_models::{Batch, Cache, Model};

/// Tokens per KV block.
const BLOCK: usize = 16;

/// The arguments, the GPU's measured ceilings, and the cuBLAS-alone reference round's seconds
/// at each batch (a dense checkpoint directory on a GPU).
struct Bench<'a>(&'a BenchArgs, Option<Limits>, Option<Vec<(usize, f64)>>);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One sequence group's KV layout: shared prompt blocks, then private blocks per sequence.
struct Layout {
    shared: usize,
    private: usize,
}

impl Layout {
    fn new(len: usize, total: usize) -> Layout {
        let shared = len / BLOCK;
        Layout { shared, private: total.div_ceil(BLOCK) - shared }
    }
    fn num_blocks(&self, batch: usize) -> usize {
        self.shared + batch * self.private
    }
    fn table(&self, seq: usize) -> Vec<u32> {
        let own = self.shared + seq * self.private;
        (0..self.shared as u32).chain((own..own + self.private).map(|b| b as u32)).collect()
    }
}

/// Feeds `ids` at `start_pos` for each `(seq, table)` (with `held`, the ids are rows of the ids
/// held there); returns the logits of every row.
fn forward<B: Backend>(
    m: &Model<B>,
    b: &B,
    cache: &mut Cache<B>,
    seqs: &[(&[u32], usize, &Vec<u32>)],
    held: Option<&B::Held>,
) -> B::Act {
    let (mut ids, mut meta) = (
        Vec::new(),
        AttnMeta { state_slots: Vec::new(), seqs: Vec::new(), slot_mapping: Vec::new(), block_size: BLOCK },
    );
    for (slot, &(tokens, start_pos, table)) in seqs.iter().enumerate() {
        meta.state_slots.push(slot as u32);
        meta.seqs.push(SeqAttn { q_start: ids.len(), q_len: tokens.len(), start_pos, block_table: table.clone() });
        meta.slot_mapping
            .extend((start_pos..start_pos + tokens.len()).map(|p| table[p / BLOCK] as usize * BLOCK + p % BLOCK));
        ids.extend_from_slice(tokens);
    }
    let rows: Vec<usize> = meta.seqs.iter().map(|s| s.q_start + s.q_len - 1).collect();
    m.decoder.forward(b, &Batch { ids: &ids, meta: &meta, logits_rows: &rows, held }, cache)
}

/// The argmax of the first logits row (waits for the device; on a GPU only the ids cross, every
/// row's, as an engine round of greedy rows takes them).
fn first_argmax<B: Backend>(b: &B, logits: &B::Act) -> usize {
    b.argmax_rows(logits).first().copied().unwrap_or(0) as usize
}

struct Measured {
    prefill_s: f64,
    round_s: Vec<f64>,
    /// Per round, the host's time to queue the forward pass (a round near it is host-bound).
    host_s: Vec<f64>,
}

fn measure<B: Backend>(
    m: &Model<B>,
    b: &B,
    prompt: &[u32],
    (batch, gen_len, repeat): (usize, usize, usize),
    picker: &mut Picker,
) -> Result<Measured, Failure> {
    let len = prompt.len();
    let lay = Layout::new(len, len + gen_len);
    let mut kv = m.decoder.alloc_cache(b, lay.num_blocks(batch), BLOCK, batch).map_err(refused)?;
    let tables: Vec<Vec<u32>> = (0..batch).map(|i| lay.table(i)).collect();
    let shared = lay.shared * BLOCK;
    let mut prefill = Vec::new();
    let mut last = 0;
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        last = first_argmax(b, &forward(m, b, &mut kv, &[(prompt, 0, &tables[0])], None));
        prefill.push(t.elapsed().as_secs_f64());
    }
    // Every other sequence adds its own copy of the prompt's tail after the shared blocks.
    if len > shared {
        for table in &tables[1..] {
            first_argmax(b, &forward(m, b, &mut kv, &[(&prompt[shared..], shared, table)], None));
        }
    }
    let (mut round_s, mut host_s) = (Vec::with_capacity(gen_len), Vec::with_capacity(gen_len));
    // Overlapped: each round is queued on the previous one's held ids (every row takes row 0's),
    // then the previous ids are read, so a round's time is the device's once the queue is full.
    let overlap = picker.mode() == PickMode::Greedy;
    let mut held: Option<B::Held> = None;
    for step in 0..gen_len {
        let id = [if held.is_some() { 0 } else { m.vocab.sampled(last) }];
        let seqs: Vec<(&[u32], usize, &Vec<u32>)> = tables.iter().map(|t| (&id[..], len + step, t)).collect();
        let t = Instant::now();
        let mut logits = forward(m, b, &mut kv, &seqs, held.as_ref());
        host_s.push(t.elapsed().as_secs_f64());
        if overlap {
            // The previous round's ids land while this one runs (the next one is fed them).
            if let Some(h) = held.replace(b.argmax_rows_held(&logits)) {
                b.held_ids(&h);
            }
        } else {
            last = picker.pick(b, &mut logits, batch, (len + step + 1) as u64);
        }
        round_s.push(t.elapsed().as_secs_f64());
    }
    if let Some(h) = held {
        b.held_ids(&h);
    }
    Ok(Measured { prefill_s: median(prefill), round_s, host_s })
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * p).round() as usize]
}

impl OnBackend for Bench<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, b: &B) -> Result<(), Failure> {
        let (a, lim, cublas) = (self.0, self.1, self.2);
        let dev = crate::tp::rank_device(&a.dev, a.tensor_parallel_size)?;
        let shape = GroupShape { size: a.tensor_parallel_size, expert_parallel: a.enable_expert_parallel };
        let m = crate::tp::open(&a.model, b, &Default::default(), &dev, shape)?;
        let rows = m.vocab.rows();
        let c = Cost::of(&m.decoder.spec, b.kv_dtype());
        let fp8 = crate::bench_fp8::Fp8Bytes::of(&a.model);
        let batches: Vec<usize> = crate::args::parse_ids(&a.batch)
            .map_err(refused)?
            .into_iter()
            .map(|n| {
                usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| refused("--batch values must be positive"))
            })
            .collect::<Result<_, _>>()?;
        let modes = PickMode::parse_list(&a.sample)?;
        let params = SamplingParams {
            temperature: a.temperature,
            top_p: a.top_p,
            top_k: a.top_k,
            seed: 1,
            ..Default::default()
        };
        params.validate().map_err(refused)?;
        println!("model={} backend={} threads={} kv={}", a.model.display(), b.name(), threads(&a.dev), b.kv_dtype());
        // Tensor-parallel GPU ranks on `cards` GPUs read their parts of a round's bytes and
        // compute their parts of its FLOPs at once: the ceilings are that many cards'.
        let cards = {
            let mut g = dev.rank_gpus.clone();
            g.sort_unstable();
            g.dedup();
            g.len().max(1)
        };
        let lim =
            lim.map(|l| Limits { copy_gb_s: l.copy_gb_s * cards as f64, gemm_tflops: l.gemm_tflops * cards as f64 });
        if let Some(l) = lim {
            let of = if cards > 1 { format!(" ({cards} cards)") } else { String::new() };
            println!("measured{of}: copy {:.0} GB/s, bf16 GEMM {:.0} TFLOP/s", l.copy_gb_s, l.gemm_tflops);
        }
        let mut results: Vec<Value> = Vec::new();
        // Greedy's decode speed at (prompt, batch), for the later modes' ratios.
        let mut greedy_tok_s: Vec<((usize, usize), f64)> = Vec::new();
        for len in crate::args::parse_ids(&a.prompt_len).map_err(refused)? {
            let len = usize::try_from(len).map_err(|_| refused("--prompt-len must be positive"))?.max(1);
            let raw: Vec<i64> = (0..len as i64).map(|i| (i * 7919 + 13) % rows as i64).collect();
            let prompt = m.vocab.check(&raw).map_err(failed)?;
            let gen_len = a.gen_len.min(m.decoder.spec.max_position_embeddings.saturating_sub(len)).max(1);
            for (&batch, &mode) in batches.iter().flat_map(|b| modes.iter().map(move |m| (b, m))) {
                let mut picker = Picker::new(mode, params.clone());
                let r = measure(&m, b, prompt.as_slice(), (batch, gen_len, a.repeat), &mut picker)?;
                let round = median(r.round_s.clone());
                let flops =
                    2.0 * c.token_params() * len as f64 + 2.0 * c.head_params + 2.0 * c.attn_width * (len * len) as f64;
                let ctx = len as f64 + gen_len as f64 / 2.0;
                // Weights once (FP8 ones a byte a weight plus their scales), then each row's KV so
                // far and its recurrent state read and written.
                let per_row = ctx * c.kv_bytes_per_token + 2.0 * c.state_bytes_per_seq;
                let bytes = c.round_bytes(batch, fp8).map(|w| w + batch as f64 * per_row);
                let mut row = json!({"prompt_len": len, "gen_len": gen_len, "batch": batch,
                    "prefill_tok_s": len as f64 / r.prefill_s, "ttft_ms": r.prefill_s * 1e3,
                    "prefill_tflops": flops / r.prefill_s / 1e12,
                    "decode_round_ms": round * 1e3, "decode_round_p10_ms": percentile(&r.round_s, 0.1) * 1e3,
                    "decode_round_p90_ms": percentile(&r.round_s, 0.9) * 1e3,
                    "decode_host_ms": median(r.host_s.clone()) * 1e3,
                    "decode_tok_s": batch as f64 / round, "decode_bytes_per_round": bytes,
                    "sample": mode.name()});
                if mode != PickMode::Greedy {
                    row["sampling"] =
                        json!({"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k});
                }
                if picker.rows > 0 {
                    row["candidates_per_row"] = json!(picker.candidates as f64 / picker.rows as f64);
                    row["draw_ms_per_round"] = json!(picker.draw_s * 1e3 / gen_len as f64);
                }
                // Ratios need the device's measured ceilings (GPU runs only) and, for decode, the
                // round's bytes (none for a MoE round of several rows); "-" elsewhere.
                let (mut mfu, mut ratio) = ("-".to_string(), "-".to_string());
                if let Some(l) = lim {
                    let m = flops / r.prefill_s / 1e12 / l.gemm_tflops;
                    mfu = format!("{m:.3}");
                    row["prefill_mfu"] = json!(m);
                    if let Some(b) = bytes {
                        let q = b / (l.copy_gb_s * 1e9) / round;
                        ratio = format!("{q:.3}");
                        row["decode_roofline_ratio"] = json!(q);
                    }
                }
                let mut versus_cublas = String::new();
                if let Some(&(_, t)) = cublas.as_ref().and_then(|c| c.iter().find(|c| c.0 == batch)) {
                    // One card's cuBLAS round over all the weights; `cards` cards split it.
                    let t = t / cards as f64;
                    row["cublas_round_ms"] = json!(t * 1e3);
                    row["cublas_round_ratio"] = json!(t / round);
                    versus_cublas = format!(" cublas {:.3}", t / round);
                }
                let tok_s = batch as f64 / round;
                let mut versus = String::new();
                if mode == PickMode::Greedy {
                    greedy_tok_s.push(((len, batch), tok_s));
                } else if let Some(&(_, g)) = greedy_tok_s.iter().find(|e| e.0 == (len, batch)) {
                    row["ratio_to_greedy"] = json!(tok_s / g);
                    versus = format!(" | {:.3} of greedy", tok_s / g);
                }
                results.push(row);
                let pick = match picker.rows {
                    0 => mode.name().to_string(),
                    n => format!(
                        "{} ({:.0} a row, drawn in {:.3} ms a round)",
                        mode.name(),
                        picker.candidates as f64 / n as f64,
                        picker.draw_s * 1e3 / gen_len as f64
                    ),
                };
                println!(
                    "prompt {len:>5} batch {batch:>3} gen {gen_len:>4} {pick} | prefill {:>9.1} tok/s ttft {:>8.1} ms mfu {mfu:>5} | decode {:>9.1} tok/s {:>7.3} ms/round (host {:.3}) roofline {ratio:>5}{versus_cublas}{versus}",
                    len as f64 / r.prefill_s,
                    r.prefill_s * 1e3,
                    batch as f64 / round,
                    round * 1e3,
                    median(r.host_s.clone()) * 1e3
                );
            }
        }
        crate::tp::healthy(&m)?;
        if let Some(path) = &a.json {
            let doc = json!({"model": a.model, "backend": b.name(), "threads": threads(&a.dev),
                "kv_dtype": b.kv_dtype().to_string(),
                "architecture": m.decoder.spec.architecture,
                "tensor_parallel_size": a.tensor_parallel_size, "cards": cards,
                "limits": lim.map(|l| json!({"copy_gb_s": l.copy_gb_s, "gemm_tflops": l.gemm_tflops})),
                "weight_bytes_bf16": 2.0 * c.all_params(),
                "weight_bytes": 2.0 * c.all_params() - fp8.dense - fp8.experts,
                "results": results});
            std::fs::write(path, doc.to_string()).map_err(failed)?;
        }
        Ok(())
    }
}

/// Runs `bench`.
pub fn run(a: &BenchArgs) -> Result<(), Failure> {
    let lim = limits(&a.dev)?;
    let cublas = match (lim, reference_matmuls(&a.model)) {
        (Some(_), Some(weights)) => {
            let batches: Vec<usize> = crate::args::parse_ids(&a.batch)
                .map_err(refused)?
                .into_iter()
                .filter_map(|n| usize::try_from(n).ok().filter(|&n| n > 0))
                .collect();
            cublas_rounds(&a.dev, &weights, &batches)?.map(|t| batches.into_iter().zip(t).collect())
        }
        _ => None,
    };
    dispatch(&crate::tp::rank_device(&a.dev, a.tensor_parallel_size)?, Bench(a, lim, cublas))
}

/// The reference round's weights of the checkpoint directory `model` (a dense model; none for
/// GGUF files, experts or recurrent layers).
fn reference_matmuls(model: &std::path::Path) -> Option<Vec<(usize, usize)>> {
    let path = model.join("config.json");
    let text = std::fs::read_to_string(&path).ok()?;
    let spec = tf_models::registry::spec_for(&tf_models::config::RawConfig::parse(&path, &text).ok()?).ok()?;
    Cost::round_matmuls(&spec)
}
