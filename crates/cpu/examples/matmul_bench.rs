//! Matmul throughput of the CPU backend for decode and prefill shapes, as ratios against limits
//! measured in the same run: copy and read bandwidth for decode, an FMA-loop peak for prefill.
//!
//! `cargo run -p tf-cpu --release --example matmul_bench [threads]`
//!
//! "hot" repeats one weight matrix (it may sit in the last-level cache); "cold" cycles through
//! copies totalling 256 MiB, so every call reads its weights from memory, as a model's layers do.

use rayon::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::hint::black_box;
use std::time::{Duration, Instant};
use tf_backend::{Backend, HostMat, HostTensor};
use tf_core::DType;
use tf_cpu::CpuBackend;
use tf_formats::TensorBytes;

/// `(rows, out, in)`: decode then prefill.
const SHAPES: [(usize, usize, usize); 5] =
    [(1, 1024, 1024), (1, 4096, 4096), (1, 3072, 1024), (128, 1024, 1024), (128, 4096, 4096)];
/// Bytes of the rings that measure memory bandwidth and of the cold weight rotation: well past
/// the last-level cache.
const BIG: usize = 256 << 20;
/// Bytes moved per timed run of the bandwidth measures: short runs, like the decode calls.
const PIECE: usize = 8 << 20;

fn main() {
    let threads = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let cpu = CpuBackend::new(threads).expect("cpu backend");
    println!("tf-cpu matmul bench: {} threads, simd {}", cpu.threads(), cpu.simd().name());
    let pool = |n| ThreadPoolBuilder::new().num_threads(n).build().expect("thread pool");
    let (one, all) = (pool(1), pool(threads));
    let (copy1, copy) = (copy_gbs(&one), copy_gbs(&all));
    let read = read_gbs(&all);
    let peak = fma_peak_gflops(&all);
    println!("memcpy (cold), read + written: {copy1:.1} GB/s on 1 thread, {copy:.1} GB/s on {threads}");
    println!("read-only sum (cold, 8 streams a thread): {read:.1} GB/s on {threads} threads");
    println!("FMA-loop peak, f32: {peak:.1} GFLOP/s on {threads} threads");
    println!();
    println!(
        "{:<5} {:>15} {:<5} {:>9} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8} {:>9}",
        "dtype",
        "rows x out x in",
        "mode",
        "median ms",
        "spread%",
        "best ms",
        "GFLOP/s",
        "GB/s",
        "GB/s/rd",
        "GB/s/cp",
        "GFLOP/pk"
    );
    for dtype in [DType::BF16, DType::F32] {
        for (rows, out, inp) in SHAPES {
            let x = HostTensor { data: random(rows * inp, 7), rows, cols: inp };
            let bytes = random_bytes(dtype, out * inp);
            let copies = if rows == 1 { BIG.div_ceil(bytes.len()) } else { 1 };
            let ws: Vec<HostMat> = (0..copies)
                .map(|_| HostMat { dtype, rows: out, cols: inp, data: TensorBytes::from_vec(&bytes) })
                .collect();
            for (mode, ring) in [("hot", &ws[..1]), ("cold", &ws[..])] {
                if mode == "cold" && copies == 1 {
                    continue;
                }
                let mut next = 0;
                let t = time(|| {
                    black_box(cpu.matmul(&x, &ring[next % ring.len()]));
                    next += 1;
                });
                let secs = t.best.as_secs_f64();
                let flops = 2.0 * (rows * out * inp) as f64 / secs / 1e9;
                let gbs = (bytes.len() + 4 * rows * (inp + out)) as f64 / secs / 1e9;
                println!(
                    "{:<5} {:>15} {:<5} {:>9.3} {:>8.0} {:>8.3} {:>8.1} {:>7.1} {:>8.2} {:>8.2} {:>9.2}",
                    dtype.name(),
                    format!("{rows}x{out}x{inp}"),
                    mode,
                    t.median.as_secs_f64() * 1e3,
                    t.spread * 100.0,
                    secs * 1e3,
                    flops,
                    gbs,
                    gbs / read,
                    gbs / copy,
                    flops / peak
                );
            }
        }
    }
    println!();
    println!("Rates and limits use the best time (the machine may be shared); GB/s counts weights and");
    println!("activations once. GB/s/rd, GB/s/cp: against read-only and copy bandwidth (decode's limit);");
    println!("GFLOP/pk: against the FMA-loop peak (prefill's limit).");
}

/// Wall times of repeated runs: median, best, and spread `(max - min) / median`.
struct Times {
    median: Duration,
    best: Duration,
    spread: f64,
}

/// Times `f` after a warm-up: at least 7 runs, more while under 0.8 s.
fn time(mut f: impl FnMut()) -> Times {
    f();
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < 7 || (start.elapsed() < Duration::from_millis(800) && samples.len() < 2000) {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    samples.sort();
    let (median, best) = (samples[samples.len() / 2], samples[0]);
    let spread = (samples[samples.len() - 1] - best).as_secs_f64() / median.as_secs_f64();
    Times { median, best, spread }
}

/// Copy bandwidth, bytes read plus written: each timed run copies the next 8 MiB piece of a
/// 256 MiB ring (so nothing is cached), split over the threads of `pool`.
fn copy_gbs(pool: &ThreadPool) -> f64 {
    let src = vec![1u64; BIG / 8];
    let mut dst = vec![0u64; BIG / 8];
    let (piece, mut next) = (PIECE / 8, 0);
    let part = piece.div_ceil(pool.current_num_threads());
    let best = time(|| {
        let at = next % (BIG / PIECE) * piece;
        next += 1;
        let (d, c) = (&mut dst[at..at + piece], &src[at..at + piece]);
        pool.install(|| d.par_chunks_mut(part).zip(c.par_chunks(part)).for_each(|(d, c)| d.copy_from_slice(c)))
    })
    .best;
    black_box(&dst);
    2.0 * PIECE as f64 / best.as_secs_f64() / 1e9
}

/// Read bandwidth: each timed run sums the next 8 MiB piece of a 256 MiB ring as integers,
/// split over the threads of `pool`, each reading 8 streams at once as the decode tiles do.
fn read_gbs(pool: &ThreadPool) -> f64 {
    let src: Vec<u64> = (0..BIG as u64 / 8).collect();
    let (piece, mut next) = (PIECE / 8, 0);
    let part = piece.div_ceil(pool.current_num_threads());
    let best = time(|| {
        let at = next % (BIG / PIECE) * piece;
        next += 1;
        let c = &src[at..at + piece];
        black_box(pool.install(|| c.par_chunks(part).map(sum8).reduce(|| 0, u64::wrapping_add)));
    })
    .best;
    PIECE as f64 / best.as_secs_f64() / 1e9
}

/// Wrapping sum of `c`, read as 8 interleaved streams.
fn sum8(c: &[u64]) -> u64 {
    let len = c.len() / 8;
    let mut acc = [0u64; 8];
    for j in 0..len {
        for (s, a) in acc.iter_mut().enumerate() {
            *a = a.wrapping_add(c[s * len + j]);
        }
    }
    acc.iter().chain(&c[8 * len..]).fold(0, |a, &b| a.wrapping_add(b))
}

/// Sustained f32 FMA rate: 12 independent 8-lane chains on every thread of `pool`.
fn fma_peak_gflops(pool: &ThreadPool) -> f64 {
    const ITERS: usize = 500_000;
    let best = time(|| {
        black_box(pool.broadcast(|ctx| fma_loop(ITERS, ctx.index() as f32)));
    })
    .best;
    (pool.current_num_threads() * ITERS * 12 * 8 * 2) as f64 / best.as_secs_f64() / 1e9
}

/// `iters` rounds of 12 independent 8-lane multiply-adds, with FMA where the CPU has it.
fn fma_loop(iters: usize, seed: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the features were detected just above.
        return unsafe { fma_loop_avx2(iters, seed) };
    }
    fma_loop_generic(iters, seed)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_loop_avx2(iters: usize, seed: f32) -> f32 {
    fma_loop_generic(iters, seed)
}

#[inline(always)]
fn fma_loop_generic(iters: usize, seed: f32) -> f32 {
    let mut acc = [[seed; 8]; 12];
    let (a, b) = (black_box(0.999_f32), black_box(1e-7_f32));
    for _ in 0..iters {
        for chain in acc.iter_mut() {
            for v in chain.iter_mut() {
                *v = v.mul_add(a, b);
            }
        }
    }
    acc.iter().flatten().sum()
}

/// `n` pseudo-random values in [-1, 1).
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// `n` random weights stored as `dtype`, little endian.
fn random_bytes(dtype: DType, n: usize) -> Vec<u8> {
    let v = random(n, 11);
    match dtype {
        DType::BF16 => v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
        DType::F16 => v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
        _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}
