//! Multi-token-prediction drafting (`--draft mtp`): the MTP heads of the glm4_moe_mtp,
//! deepseek_v3_mtp (NextN layout), qwen3_next_mtp and qwen3_5_mtp (`mtp.*`, over hybrid targets)
//! and step3p7_mtp (Step's layout) fixtures against the reference scripts/fixture_mtp.py
//! computes from transformers' modules,
//! chunked == whole, drafted == undrafted, a head that repeats its input token getting drafts
//! accepted, the head's own prefix cache (blocks of the K/V it wrote for an earlier request,
//! never blocks it fed zero rows), and what is refused.

mod checkpoint_util;

use checkpoint_util::{copy, edit_config, set_tensor, with_config};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use tf_backend::{AttnMeta, Backend, RefBackend};
use tf_cpu::CpuBackend;
use tf_engine::engine::{DraftConfig, DraftKind, EngineConfig, spawn_with_drafter};
use tf_formats::SafetensorsFile;
use tf_models::{Batch, Model};
use tf_testkit::{
    MTP_FIXTURES, Req, check_drafted_equals_undrafted, config, engine, fixture, golden, mtp_logits, run, sampling,
};

const FIXTURES: [&str; 5] =
    [MTP_FIXTURES[0].0, MTP_FIXTURES[1].0, MTP_FIXTURES[2].0, MTP_FIXTURES[3].0, MTP_FIXTURES[4].0];

/// Largest |ours - reference| allowed on an MTP logit (as the golden tests allow on the target's).
const TOL: f32 = 1e-4;

fn check_reference<B: Backend>(b: &B) {
    for family in FIXTURES {
        let dir = fixture(family);
        let m = Model::open(&dir, b).unwrap();
        let g = golden(&dir);
        let want = SafetensorsFile::open(&dir.join("mtp_golden.safetensors")).unwrap();
        let mut compared = 0;
        for (i, raw) in g.prompts.iter().enumerate() {
            let Some(t) = want.tensor(&format!("mtp_logits_{i}")).unwrap() else { continue };
            let ids = m.vocab.check(raw).unwrap();
            let got = mtp_logits(b, &m, ids.as_slice(), usize::MAX);
            let want = t.to_f32();
            assert_eq!(got.len(), want.len(), "{family} prompt {i}");
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            eprintln!("{family} [{}] prompt {i}: max |MTP logit err| = {err:.2e}", b.name());
            assert!(err <= TOL, "{family} prompt {i}: MTP logit error {err} > {TOL}");
            compared += 1;
        }
        assert!(compared >= 3, "{family}: {compared} prompts compared");
    }
}

#[test]
fn mtp_heads_match_the_reference() {
    check_reference(&RefBackend);
    check_reference(&CpuBackend::new(2).unwrap());
}

/// The largest |logit - carried row . lm_head row| over the longest golden prompt of `family`:
/// how far the row the head hands the next step is from the one its head read.
fn carried_row_vs_head(family: &str) -> f32 {
    let b = CpuBackend::new(2).unwrap();
    let dir = fixture(family);
    let m = Model::open(&dir, &b).unwrap();
    let head = m.load_mtp(&b).unwrap();
    let g = golden(&dir);
    let ids = m.vocab.check(g.prompts.iter().max_by_key(|p| p.len()).unwrap()).unwrap();
    let ids = ids.as_slice();
    let n = ids.len();
    let table: Vec<u32> = (0..n.div_ceil(16) as u32).collect();
    let mut cache = m.decoder.alloc_cache(&b, table.len(), 16, 1).unwrap();
    let meta = AttnMeta::single(0, n, table.clone(), 16);
    let (_, hidden) =
        m.decoder.forward_hidden(&b, &Batch { ids, meta: &meta, logits_rows: &[n - 1], held: None }, &mut cache);
    let w = m.decoder.spec.hidden_size;
    let hidden = b.download(&hidden);
    let mut mtp_cache = head.alloc_cache(&b, table.len(), 16).unwrap();
    let meta = AttnMeta::single(0, n - 1, table, 16);
    let rows: Vec<usize> = (0..n - 1).collect();
    let batch = Batch { ids: &ids[1..], meta: &meta, logits_rows: &rows, held: None };
    let h = b.upload(&hidden[..(n - 1) * w], n - 1, w);
    let (logits, out) = head.forward(&b, &m.decoder, &batch, &h, &mut mtp_cache);
    let (logits, out) = (b.download(&logits), b.download(&out));
    let st = SafetensorsFile::open(&dir.join("model.safetensors")).unwrap();
    let lm = st.tensor("lm_head.weight").unwrap().unwrap().to_f32();
    let vocab = lm.len() / w;
    let mut err = 0.0f32;
    for r in 0..n - 1 {
        for v in 0..vocab {
            let dot: f32 = (0..w).map(|k| out[r * w + k] * lm[v * w + k]).sum();
            err = err.max((dot - logits[r * vocab + v]).abs());
        }
    }
    err
}

#[test]
fn steps_mtp_layer_hands_the_next_step_the_row_its_head_read() {
    // Step: the output after shared_head.norm, which the target's head read.
    let err = carried_row_vs_head("step3p7_mtp");
    assert!(err < 1e-4, "step3p7_mtp: {err}");
    // GLM (NextN): the output before shared_head.norm, not what the head read.
    let err = carried_row_vs_head("glm4_moe_mtp");
    assert!(err > 1e-2, "glm4_moe_mtp: {err}");
}

#[test]
fn mtp_in_chunks_equals_whole() {
    let b = CpuBackend::new(2).unwrap();
    for family in FIXTURES {
        let m = Model::open(&fixture(family), &b).unwrap();
        let g = golden(&fixture(family));
        let longest = g.prompts.iter().max_by_key(|p| p.len()).unwrap();
        let ids = m.vocab.check(longest).unwrap();
        let whole = mtp_logits(&b, &m, ids.as_slice(), usize::MAX);
        for chunk in [1, 3, 7] {
            assert!(mtp_logits(&b, &m, ids.as_slice(), chunk) == whole, "{family}: chunks of {chunk}");
        }
    }
}

#[test]
fn mtp_drafted_equals_undrafted() {
    let cpu = || CpuBackend::new(1).unwrap();
    for family in FIXTURES {
        for seeded in [false, true] {
            check_drafted_equals_undrafted(&cpu, family, DraftKind::Mtp, None, seeded);
        }
    }
}

/// Greedy, drafting, 20 tokens after a 64-token prefix (four blocks) shared by every `tail`.
fn after_prefix(tail: i64, draft: bool) -> Req {
    let mut prompt: Vec<i64> = (0..64).map(|j| (j * 37 + 11) % 400).collect();
    prompt.extend([tail, tail + 3, tail + 7]);
    Req { prompt, params: sampling(None, 0.0, 0, 1.0), max_tokens: 20, top_logprobs: None, draft }
}

#[test]
fn mtp_head_reuses_its_own_blocks_after_a_prefix_hit() {
    let cpu = || CpuBackend::new(1).unwrap();
    let cfg = EngineConfig { draft: DraftConfig { kind: DraftKind::Mtp, num_tokens: 3 }, ..config(256, 128, 32, true) };
    let cached = |h: &tf_engine::engine::EngineHandle| h.stats.draft_cached_tokens.load(Ordering::Relaxed);
    for family in FIXTURES {
        let cold = engine(&cpu, family, cfg);
        let want = run(&cold, &[after_prefix(9, true)]);
        assert_eq!(cached(&cold), 0, "{family}: nothing cached before");
        let warm = engine(&cpu, family, cfg);
        run(&warm, &[after_prefix(5, true)]);
        assert_eq!(run(&warm, &[after_prefix(9, true)]), want, "{family}: after a hit");
        // The fourth block's last position was fed the token after the prefix, which differs.
        assert_eq!(cached(&warm), 48, "{family}: the head took three blocks it wrote before");

        // The target's own hit leaves the head zero rows for the prefix: it caches none of them.
        let weak = engine(&cpu, family, cfg);
        run(&weak, &[after_prefix(5, false)]);
        assert_eq!(run(&weak, &[after_prefix(9, true)]), want, "{family}: drafting after an undrafted request");
        run(&weak, &[after_prefix(9, true)]);
        assert_eq!(cached(&weak), 0, "{family}: blocks fed zero rows are never reused");
    }
}

/// An edit of one tensor's f32 values, given its name and shape.
type Edit<'a> = &'a dyn Fn(&str, &[usize], &mut [f32]);

/// Rewrites `dir`'s model.safetensors with `edit` applied to each tensor's f32 values (by name).
fn edit_tensors(dir: &Path, edit: Edit<'_>) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in st.tensors() {
        let shape = view.shape().to_vec();
        assert_eq!(view.dtype(), safetensors::Dtype::BF16, "{name}");
        let mut v: Vec<f32> =
            view.data().chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect();
        edit(&name, &shape, &mut v);
        out.push((name, shape, v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect()));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = out
        .iter()
        .map(|(n, s, d)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, s.clone(), d).unwrap())
        })
        .collect();
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    std::fs::write(&path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

/// A copy of `family`'s fixture (its MTP layer `model.layers.{layer}.`) with an MTP head that
/// repeats its input token: the layer adds nothing (its output projections are zero),
/// `eh_proj` passes the normed embedding through and drops the hidden row, its norms scale by
/// one (weights `one`: 1, or 0 for `(1 + w)` norms), and its own head (`shared_head.head`,
/// added) is the embedding table, so each draft is the token fed (random embeddings are far
/// more similar to themselves than to each other).
fn repeating_head(family: &str, layer: usize, one: f32) -> tempfile::TempDir {
    let d = copy(family);
    let prefix = format!("model.layers.{layer}.");
    set_tensor(d.path(), &format!("{prefix}shared_head.head.weight"), Some(&[512, 64]));
    let bytes = std::fs::read(d.path().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let embed = st.tensor("model.embed_tokens.weight").unwrap().data().to_vec();
    let embed: Vec<f32> = embed.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect();
    edit_tensors(d.path(), &|name, shape, v| {
        let Some(rest) = name.strip_prefix(prefix.as_str()) else { return };
        if rest == "eh_proj.weight" {
            let (rows, cols) = (shape[0], shape[1]);
            for r in 0..rows {
                for c in 0..cols {
                    v[r * cols + c] = if c == r { 1.0 } else { 0.0 };
                }
            }
        } else if rest.ends_with("o_proj.weight") || rest.ends_with("down_proj.weight") {
            v.iter_mut().for_each(|x| *x = 0.0);
        } else if rest == "shared_head.head.weight" {
            v.copy_from_slice(&embed);
        } else if ["enorm.weight", "hnorm.weight", "shared_head.norm.weight"].contains(&rest) {
            v.iter_mut().for_each(|x| *x = one);
        }
    });
    d
}

#[test]
fn a_head_repeating_its_input_gets_drafts_accepted() {
    // GLM's layout, and Step's (`(1 + w)` norms; the head reads the normed output).
    for (family, layer, one) in [("glm4_moe_mtp", 3, 1.0), ("step3p7_mtp", 4, 0.0)] {
        let d = repeating_head(family, layer, one);
        let cpu = || CpuBackend::new(1).unwrap();
        // fixture() joins the fixtures directory with this absolute path: the path itself.
        let path = d.path().to_str().unwrap();
        let counts = check_drafted_equals_undrafted(&cpu, path, DraftKind::Mtp, None, false);
        assert!(
            counts.accepted > 0,
            "{family}: the tiny model repeats tokens greedily, and so does this head: {counts:?}"
        );
    }
}

#[test]
fn mtp_drafting_without_mtp_layers_is_refused() {
    let b = CpuBackend::new(1).unwrap();
    let m = Model::open(&fixture("qwen3"), &b).unwrap();
    let cfg = EngineConfig { draft: DraftConfig { kind: DraftKind::Mtp, num_tokens: 4 }, ..config(16, 64, 32, true) };
    let err = spawn_with_drafter(m, None, b, cfg).err().expect("refused").to_string();
    assert!(err.contains("no multi-token-prediction layers"), "{err}");
    // And through the command line: one line, exit 2.
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["bench-draft", "--draft", "mtp", "--gen-len", "4", "--model"])
        .arg(fixture("qwen3"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no multi-token-prediction layers") && !stderr.contains("panicked"), "{stderr}");
}

/// Spawning an MTP-drafting engine over `dir`: the refusal's text.
fn spawn_error(dir: &Path) -> String {
    let b = CpuBackend::new(1).unwrap();
    let m = Model::open(dir, &b).unwrap();
    let cfg = EngineConfig { draft: DraftConfig { kind: DraftKind::Mtp, num_tokens: 4 }, ..config(16, 64, 32, true) };
    spawn_with_drafter(m, None, b, cfg).err().expect("refused").to_string()
}

#[test]
fn mtp_layers_disagreeing_with_the_config_are_refused_naming_the_tensor() {
    // eh_proj of the wrong width.
    let d = copy("glm4_moe_mtp");
    set_tensor(d.path(), "model.layers.3.eh_proj.weight", Some(&[64, 64]));
    let err = spawn_error(d.path());
    assert!(err.contains("model.layers.3.eh_proj.weight") && err.contains("64"), "{err}");
    // A missing norm.
    let d = copy("glm4_moe_mtp");
    set_tensor(d.path(), "model.layers.3.hnorm.weight", None);
    assert!(spawn_error(d.path()).contains("model.layers.3.hnorm.weight"));
    // A tensor under the layer that nothing reads.
    let d = copy("deepseek_v3_mtp");
    set_tensor(d.path(), "model.layers.3.extra_proj.weight", Some(&[4, 4]));
    assert!(spawn_error(d.path()).contains("model.layers.3.extra_proj.weight"));
    // Two depths.
    let d = with_config("glm4_moe_mtp", "num_nextn_predict_layers", 2.into());
    assert!(spawn_error(d.path()).contains("2 MTP depths"));
    // GLM-5's MTP layer carries its own lightning indexer, checked as the decoder's are.
    let d = copy("glm_moe_dsa_mtp");
    set_tensor(d.path(), "model.layers.3.self_attn.indexer.wk.weight", Some(&[16, 64]));
    let err = spawn_error(d.path());
    assert!(err.contains("model.layers.3.self_attn.indexer.wk.weight") && err.contains("32"), "{err}");
}

#[test]
fn step_mtp_layers_disagreeing_with_the_config_are_refused_naming_the_tensor() {
    // eh_proj of the wrong width.
    let d = copy("step3p7_mtp");
    set_tensor(d.path(), "model.layers.4.eh_proj.weight", Some(&[64, 64]));
    let err = spawn_error(d.path());
    assert!(err.contains("model.layers.4.eh_proj.weight") && err.contains("128"), "{err}");
    // A query projection of the sliding layers' 8 heads: the MTP layer has the full layers' 4.
    let d = copy("step3p7_mtp");
    set_tensor(d.path(), "model.layers.4.self_attn.q_proj.weight", Some(&[128, 64]));
    let err = spawn_error(d.path());
    assert!(err.contains("model.layers.4.self_attn.q_proj.weight") && err.contains("128"), "{err}");
    // Stacked experts of the wrong width.
    let d = copy("step3p7_mtp");
    set_tensor(d.path(), "model.layers.4.moe.up_proj.weight", Some(&[8, 20, 64]));
    assert!(spawn_error(d.path()).contains("model.layers.4.moe.up_proj.weight"));
    // A missing head norm, and a tensor under the layer that nothing reads.
    let d = copy("step3p7_mtp");
    set_tensor(d.path(), "model.layers.4.shared_head.norm.weight", None);
    assert!(spawn_error(d.path()).contains("model.layers.4.shared_head.norm.weight"));
    let d = copy("step3p7_mtp");
    set_tensor(d.path(), "model.layers.4.extra_proj.weight", Some(&[4, 4]));
    assert!(spawn_error(d.path()).contains("model.layers.4.extra_proj.weight"));
    // Per-layer lists without the MTP layer's entry: transformers cannot build it, refused saying so.
    let d = copy("step3p7_mtp");
    edit_config(d.path(), |v| {
        let types = v["text_config"]["layer_types"].as_array_mut().unwrap();
        types.pop();
    });
    assert!(spawn_error(d.path()).contains("no attention type"));
}

/// step3p7_mtp announcing 3 MTP depths, its per-layer lists padded to match (the two it lacks
/// stay unread).
fn three_step_depths() -> tempfile::TempDir {
    let d = copy("step3p7_mtp");
    edit_config(d.path(), |v| {
        let t = &mut v["text_config"];
        t["num_nextn_predict_layers"] = 3.into();
        for key in ["layer_types", "rope_theta", "partial_rotary_factors", "swiglu_limits", "swiglu_limits_shared"] {
            let list = t[key].as_array_mut().unwrap();
            let last = list.last().unwrap().clone();
            list.extend([last.clone(), last]);
        }
    });
    d
}

#[test]
fn a_step_checkpoint_of_three_depths_drafts_with_its_first() {
    let b = CpuBackend::new(2).unwrap();
    let one = Model::open(&fixture("step3p7_mtp"), &b).unwrap();
    let d = three_step_depths();
    let three = Model::open(d.path(), &b).unwrap();
    let g = golden(&fixture("step3p7_mtp"));
    let longest = g.prompts.iter().max_by_key(|p| p.len()).unwrap();
    let ids = one.vocab.check(longest).unwrap();
    let want = mtp_logits(&b, &one, ids.as_slice(), usize::MAX);
    assert!(mtp_logits(&b, &three, ids.as_slice(), usize::MAX) == want);
    let cpu = || CpuBackend::new(1).unwrap();
    check_drafted_equals_undrafted(&cpu, d.path().to_str().unwrap(), DraftKind::Mtp, None, false);
}
