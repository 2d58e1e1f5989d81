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
fn a_size_the_heads_cannot_split_or_a_device_without_ranks_is_refused_at_start() {
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
    // One GPU named for two ranks; the reference backend has no ranks.
    let (code, err) = run(&["--device", "cuda:1", "--tensor-parallel-size", "2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("1 GPU(s) named for 2 ranks"), "{err}");
    let (code, err) = run(&["--device", "ref", "--tensor-parallel-size", "2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--device cpu or cuda"), "{err}");
    // A GPU per rank, in a build without CUDA.
    #[cfg(not(feature = "cuda"))]
    {
        let (code, err) = run(&["--device", "cuda", "--tensor-parallel-size", "2"]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("--features cuda"), "{err}");
    }
}
