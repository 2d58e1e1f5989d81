//! The int8 quantized matmul with each integer dot-product choice this CPU has, timed interleaved
//! in one process (AVX2, then each VNNI choice, round after round), so that other load on the
//! machine falls on all alike; the fastest round of each (the least disturbed by that load) and
//! its ratio to AVX2's.
//!
//! `cargo run -p tf-cpu --release --example int_dot_bench [threads] [rounds] [rows,rows,...]`
//! (rows default 128,1: prefill and decode).

use std::hint::black_box;
use std::time::Instant;
use tf_backend::{Backend, HostMat, HostTensor};
use tf_core::{DType, QuantType};
use tf_cpu::{CpuBackend, CpuOptions, IntDot};
use tf_formats::TensorBytes;

/// `(type, out, in)`: the matrices of Gemma 3 270M Q4_K_M (gate / up, down, attention output,
/// the tied output head), each timed at every row count asked for.
const MATS: [(QuantType, usize, usize); 5] = [
    (QuantType::Q5_0, 2048, 640),
    (QuantType::Q4K, 640, 2048),
    (QuantType::Q6K, 640, 2048),
    (QuantType::Q4K, 640, 1024),
    (QuantType::Q8_0, 262144, 640),
];

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(7);
    let row_counts: Vec<usize> = args
        .next()
        .map(|s| s.split(',').filter_map(|r| r.parse().ok()).filter(|&r| r > 0).collect())
        .unwrap_or_else(|| vec![128, 1]);
    let dots: Vec<IntDot> =
        [IntDot::Avx2, IntDot::AvxVnni, IntDot::Avx512Vnni].into_iter().filter(|d| d.available()).collect();
    if dots.is_empty() {
        println!("this CPU lacks AVX2: nothing to compare");
        return;
    }
    let backends: Vec<CpuBackend> = dots
        .iter()
        .map(|&int_dot| CpuBackend::with_options(CpuOptions { int_dot, ..CpuOptions::new(threads) }).expect("backend"))
        .collect();
    println!("int8 matmul, {threads} threads, fastest of {rounds} interleaved rounds, ms (ratio: AVX2 time / this)");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut byte = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as u8
    };
    for (q, out, inp) in MATS {
        for &rows in &row_counts {
            let mut bytes: Vec<u8> = (0..out * inp / q.block_len() * q.block_bytes()).map(|_| byte()).collect();
            // Small finite f16 scales everywhere these types keep one (bytes 0..4 and the last 2).
            let h = half::f16::from_f32(0.01).to_le_bytes();
            for b in bytes.chunks_exact_mut(q.block_bytes()) {
                let n = b.len();
                for at in [0, 2, n - 2] {
                    b[at..at + 2].copy_from_slice(&h);
                }
            }
            let w = HostMat {
                dtype: DType::Quant(q),
                rows: out,
                cols: inp,
                data: TensorBytes::from_vec(&bytes),
                scales: None,
            };
            let x = HostTensor {
                data: (0..rows * inp).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect(),
                rows,
                cols: inp,
            };
            let reps = (4e8 / (rows.max(16) * out * inp) as f64).ceil() as usize;
            let mut times = vec![Vec::new(); dots.len()];
            for _ in 0..rounds {
                for (t, b) in times.iter_mut().zip(&backends) {
                    let start = Instant::now();
                    for _ in 0..reps {
                        black_box(b.matmul(black_box(&x), &w));
                    }
                    t.push(start.elapsed().as_secs_f64() * 1e3 / reps as f64);
                }
            }
            let best: Vec<f64> = times.iter().map(|t| t.iter().copied().fold(f64::INFINITY, f64::min)).collect();
            let cells: Vec<String> =
                dots.iter().zip(&best).map(|(d, m)| format!("{} {m:.3} ms ({:.2}x)", d.name(), best[0] / m)).collect();
            println!("{:<5} {:>14}  {}", q.name(), format!("{rows}x{out}x{inp}"), cells.join("  "));
        }
    }
}
