//! `serve --tensor-parallel-size N` on the CPU (ranks as threads): the same greedy tokens as one
//! rank (the logits within the tolerance tests/tensor_parallel.rs states), alone and several at
//! once; a size the model's heads cannot split refused at start, and a GPU device by name.

mod serve_util;

use serve_util::Server;
use std::process::Command;

#[test]
fn two_and_four_ranks_answer_as_one_rank_does() {
    let one = Server::start(&["--device", "cpu"]).normal();
    for size in ["2", "4"] {
        let tp = Server::start(&["--device", "cpu", "--tensor-parallel-size", size]);
        let got = tp.normal();
        assert_eq!(got.len(), 6);
        assert_eq!(got, one, "{size} ranks: greedy tokens");
        // Several at once: each answers like the first.
        let again: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(|| tp.normal())).collect();
            hs.into_iter().map(|h| h.join().expect("request thread")).collect()
        });
        assert!(again.iter().all(|a| *a == got), "{size} ranks: concurrent answers equal the solo one");
    }
}

#[test]
fn a_size_the_heads_cannot_split_or_a_gpu_device_is_refused_at_start() {
    let dir = serve_util::model_dir();
    let bin = env!("CARGO_BIN_EXE_tensorfold");
    let run = |args: &[&str]| {
        let out = Command::new(bin)
            .args(["serve", "--model", dir.path().to_str().expect("utf-8"), "--port", "0"])
            .args(args)
            .output()
            .expect("runs");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["--device", "cpu", "--tensor-parallel-size", "3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("KV heads"), "{err}");
    let (code, err) = run(&["--device", "cuda", "--tensor-parallel-size", "2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--device cpu"), "{err}");
}
