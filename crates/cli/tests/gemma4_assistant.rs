//! The Gemma 4 assistant drafter (`gemma4_assistant` checkpoints through `--draft model:DIR`):
//! its two first draft steps against transformers' own assistant forward
//! (scripts/fixture_gemma4_assistant.py), drafted == undrafted, and what is refused.

mod checkpoint_util;
mod serve_util;

use checkpoint_util::{copy, edit_config, set_tensor};
use serde_json::json;
use serve_util::Server;
use std::path::Path;
use std::process::Command;
use tf_backend::{AttnMeta, Backend, RefBackend};
use tf_cpu::CpuBackend;
use tf_engine::engine::DraftKind;
use tf_formats::SafetensorsFile;
use tf_models::{Batch, Gemma4Assistant, Model};
use tf_testkit::{check_drafted_equals_undrafted, fixture};

/// The assistant fixtures and their targets.
const FIXTURES: [(&str, &str); 2] = [("gemma4_assistant", "gemma4"), ("gemma4_assistant_ordered", "gemma4_kvshare")];

/// Largest |ours - reference| allowed on a draft logit (as the golden tests allow on the target's).
const TOL: f32 = 1e-4;

/// The logits `[2, vocab]` and argmax tokens of the first two draft steps after a prefill of
/// `ids[..n - 1]`, `ids[n - 1]` the last token; the second step fed `feed` (the reference's
/// first draft token). The ids the engine drafts with (`step_ids`, picked where the logits are)
/// must be those argmax tokens.
fn two_steps<B: Backend>(b: &B, t: &Model<B>, a: &Gemma4Assistant<B>, ids: &[u32], feed: u32) -> (Vec<f32>, [u32; 2]) {
    let n = ids.len();
    let blocks = n.div_ceil(16);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut cache = t.decoder.alloc_cache(b, blocks, 16, 1).unwrap();
    let meta = AttnMeta::single(0, n - 1, table.clone(), 16);
    let batch = Batch { ids: &ids[..n - 1], meta: &meta, logits_rows: &[n - 2], held: None };
    let (_, hidden) = t.decoder.forward_hidden(b, &batch, &mut cache);
    let w = t.decoder.spec.hidden_size;
    let mut h = b.upload(&b.download(&hidden)[(n - 2) * w..(n - 1) * w], 1, w);
    let (mut out, mut tokens) = (Vec::new(), [0; 2]);
    let positions = [(n - 1) as u32];
    for (step, token) in [ids[n - 1], feed].into_iter().enumerate() {
        let meta = Gemma4Assistant::<B>::step_meta(vec![(n - 1, table.clone())], 16);
        let (logits, next) = a.step(b, &t.decoder, &[token], &positions, &h, &meta, &mut cache.kv);
        tokens[step] = tf_engine::sampler::argmax(&logits);
        let (picked, _) = a.step_ids(b, &t.decoder, &[token], &positions, &h, &meta, &mut cache.kv);
        assert_eq!(picked, [tokens[step]], "step {step}: the drafted id is the logits' argmax");
        out.extend(logits);
        h = next;
    }
    (out, tokens)
}

fn check_reference<B: Backend>(b: &B) {
    for (name, target) in FIXTURES {
        let dir = fixture(name);
        let t = Model::open(&fixture(target), b).unwrap();
        let a = Gemma4Assistant::open(&dir, &t.decoder, b).unwrap_or_else(|e| panic!("{name}: {e}"));
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("assistant_golden.json")).unwrap()).unwrap();
        let want = SafetensorsFile::open(&dir.join("assistant_golden.safetensors")).unwrap();
        let prompts = meta["prompts"].as_array().unwrap();
        assert!(prompts.len() >= 4, "{name}");
        for (i, p) in prompts.iter().enumerate() {
            let ids: Vec<u32> = p.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            let logits = want.tensor(&format!("draft_logits_{i}")).unwrap().unwrap().to_f32();
            let tokens: Vec<u32> = want
                .tensor(&format!("draft_tokens_{i}"))
                .unwrap()
                .unwrap()
                .to_f32()
                .iter()
                .map(|&x| x as u32)
                .collect();
            let (got, got_tokens) = two_steps(b, &t, &a, &ids, tokens[0]);
            assert_eq!(got.len(), logits.len(), "{name} prompt {i}");
            let vocab = logits.len() / 2;
            for step in 0..2 {
                let rows = (&got[step * vocab..(step + 1) * vocab], &logits[step * vocab..(step + 1) * vocab]);
                let err = rows.0.iter().zip(rows.1).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
                eprintln!(
                    "{name} [{}] prompt {i} ({} ids) step {}: max |draft logit err| = {err:.2e}",
                    b.name(),
                    ids.len(),
                    step + 1
                );
                assert!(err <= TOL, "{name} prompt {i} step {}: error {err} > {TOL}", step + 1);
            }
            assert_eq!(got_tokens.to_vec(), tokens, "{name} prompt {i}: draft tokens");
        }
    }
}

#[test]
fn assistant_draft_steps_match_transformers() {
    check_reference(&RefBackend);
    check_reference(&CpuBackend::new(2).unwrap());
}

/// Opening `dir` as an assistant beside the `target` fixture: the refusal's text.
fn open_error(dir: &Path, target: &str) -> String {
    let b = CpuBackend::new(1).unwrap();
    let t = Model::open(&fixture(target), &b).unwrap();
    Gemma4Assistant::open(dir, &t.decoder, &b).err().expect("refused").to_string()
}

#[test]
fn assistants_disagreeing_with_their_target_or_config_are_refused_by_name() {
    // A vocabulary other than the target's.
    let d = copy("gemma4_assistant");
    edit_config(d.path(), |v| v["text_config"]["vocab_size"] = 256.into());
    let err = open_error(d.path(), "gemma4");
    assert!(err.contains("vocab_size 256") && err.contains("512"), "{err}");
    // A backbone other than the target's hidden size.
    let d = copy("gemma4_assistant");
    edit_config(d.path(), |v| v["backbone_hidden_size"] = 48.into());
    let err = open_error(d.path(), "gemma4");
    assert!(err.contains("backbone_hidden_size 48") && err.contains("64"), "{err}");
    // A tensor of the wrong shape.
    let d = copy("gemma4_assistant");
    set_tensor(d.path(), "pre_projection.weight", Some(&[32, 64]));
    let err = open_error(d.path(), "gemma4");
    assert!(err.contains("pre_projection.weight") && err.contains("[32, 64]") && err.contains("[32, 128]"), "{err}");
    // A missing one, and one nothing reads.
    let d = copy("gemma4_assistant_ordered");
    set_tensor(d.path(), "masked_embedding.centroids.weight", None);
    assert!(open_error(d.path(), "gemma4_kvshare").contains("masked_embedding.centroids.weight"));
    let d = copy("gemma4_assistant");
    set_tensor(d.path(), "model.layers.0.extra.weight", Some(&[4, 4]));
    assert!(open_error(d.path(), "gemma4").contains("model.layers.0.extra.weight"));
    // Query heads over KV heads other than the target's.
    let d = copy("gemma4_assistant");
    edit_config(d.path(), |v| v["text_config"]["num_key_value_heads"] = 4.into());
    let err = open_error(d.path(), "gemma4");
    assert!(err.contains("assistant layer 0") && err.contains("(4, 16)") && err.contains("(2, 16)"), "{err}");
    // Layers that are not all KV-shared, and a target that is not Gemma 4.
    let d = copy("gemma4_assistant");
    edit_config(d.path(), |v| v["text_config"]["num_kv_shared_layers"] = 1.into());
    assert!(open_error(d.path(), "gemma4").contains("num_kv_shared_layers"));
    let err = open_error(&fixture("gemma4_assistant"), "gemma3");
    assert!(err.contains("Gemma 4 target"), "{err}");
}

#[test]
fn assistant_drafted_equals_undrafted() {
    let cpu = || CpuBackend::new(1).unwrap();
    for (name, target) in FIXTURES {
        for seeded in [false, true] {
            let counts = check_drafted_equals_undrafted(&cpu, target, DraftKind::Model, Some(name), seeded);
            eprintln!("{target} + {name} seeded={seeded}: {counts:?}");
        }
    }
}

/// An edit of one tensor's f32 values, given its name and shape.
type Edit<'a> = &'a dyn Fn(&str, &[usize], &mut [f32]);

/// Rewrites `dir`'s model.safetensors (all bf16) with `edit` applied to each tensor's f32 values.
fn edit_tensors(dir: &Path, edit: Edit<'_>) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in st.tensors() {
        let shape = view.shape().to_vec();
        let mut v: Vec<f32> =
            view.data().chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect();
        edit(&name, &shape, &mut v);
        out.push((name, shape, v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect()));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = (out.iter())
        .map(|(n, s, d)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, s.clone(), d).unwrap())
        })
        .collect();
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    std::fs::write(&path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

/// The gemma4_assistant fixture made to repeat its input token: its layers add nothing (zero
/// output projections), `pre_projection` passes the first 32 values of the target's scaled
/// embedding through and drops the hidden row, its final norm is ones, and its tied head is the
/// first 32 columns of the target's embedding table (random embeddings are far more similar to
/// themselves than to each other).
fn repeating_assistant() -> tempfile::TempDir {
    let d = copy("gemma4_assistant");
    let bytes = std::fs::read(fixture("gemma4").join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let embed: Vec<f32> = (st.tensor("model.embed_tokens.weight").unwrap().data().chunks_exact(2))
        .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    edit_tensors(d.path(), &|name, shape, v| {
        if name == "pre_projection.weight" {
            let cols = shape[1];
            v.iter_mut().enumerate().for_each(|(i, x)| *x = if i % cols == i / cols { 1.0 } else { 0.0 });
        } else if name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight") {
            v.iter_mut().for_each(|x| *x = 0.0);
        } else if name == "model.norm.weight" {
            v.iter_mut().for_each(|x| *x = 1.0);
        } else if name == "model.embed_tokens.weight" {
            for (row, out) in v.chunks_exact_mut(32).enumerate() {
                out.copy_from_slice(&embed[row * 64..row * 64 + 32]);
            }
        }
    });
    d
}

#[test]
fn an_assistant_repeating_its_input_gets_drafts_accepted() {
    let d = repeating_assistant();
    let cpu = || CpuBackend::new(1).unwrap();
    // fixture() joins the fixtures directory with this absolute path: the path itself.
    let drafter = d.path().to_str().unwrap();
    for seeded in [false, true] {
        let counts = check_drafted_equals_undrafted(&cpu, "gemma4", DraftKind::Model, Some(drafter), seeded);
        eprintln!("gemma4 + repeating assistant seeded={seeded}: {counts:?}");
        assert!(
            seeded || counts.accepted > 0,
            "the tiny model repeats tokens greedily, and so does this assistant: {counts:?}"
        );
    }
}

#[test]
fn bench_draft_and_serve_take_an_assistant_as_draft_model() {
    let draft = format!("model:{}", fixture("gemma4_assistant").display());
    // bench-draft fails when the drafted output differs from the undrafted one.
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["bench-draft", "--gen-len", "12", "--draft", &draft, "--model"])
        .arg(fixture("gemma4"))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("code-edit") && stdout.contains("free"), "{stdout}");
    // serve: the same request with and without drafting gives the same tokens.
    let dir = copy("gemma4");
    let server = Server::start_in(dir, &["--draft", &draft, "--num-draft-tokens", "3"]);
    let body = |draft: bool| json!({"model": "tiny", "prompt": [5, 6, 7, 5, 6, 7, 5, 6], "max_tokens": 16, "temperature": 0, "draft": draft});
    let on = server.post("/v1/completions", &body(true)).json();
    let off = server.post("/v1/completions", &body(false)).json();
    assert!(on["choices"][0]["text"].is_string(), "{on}");
    assert_eq!(on["choices"][0]["text"], off["choices"][0]["text"], "{on} {off}");
    assert!(server.metric("tensorfold_draft_proposed_tokens_total") > 0.0, "the assistant drafted");
}

#[test]
fn an_assistant_for_another_target_is_refused_at_the_command_line() {
    let draft = format!("model:{}", fixture("gemma4_assistant").display());
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["bench-draft", "--gen-len", "4", "--draft", &draft, "--model"])
        .arg(fixture("qwen3"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Gemma 4 target") && !stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
