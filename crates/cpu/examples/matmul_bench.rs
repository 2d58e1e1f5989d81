//! Matmul throughput of the CPU backend for decode and prefill shapes, as ratios against limits
//! measured in the same run: copy and read bandwidth for decode, an FMA-loop peak (f32 weights,
//! f32 path of quantized ones) or an 8-bit multiply-add peak (integer path) for prefill.
//!
//! `cargo run -p tf-cpu --release --example matmul_bench [threads] [float|quant] [q4_k,q8_0,...]`
//! (float: bf16, f32 and MXFP4 weights)
//!
//! "hot" repeats one weight matrix (it may sit in the last-level cache); "cold" cycles through
//! copies totalling 256 MiB, so every call reads its weights from memory, as a model's layers do.

use rayon::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::hint::black_box;
use std::time::{Duration, Instant};
use tf_backend::{Backend, HostMat, HostTensor};
use tf_core::{DType, QuantType};
use tf_cpu::{CpuBackend, CpuOptions, QuantActs};
use tf_formats::TensorBytes;

/// `(rows, out, in)`: decode then prefill.
const SHAPES: [(usize, usize, usize); 5] =
    [(1, 1024, 1024), (1, 4096, 4096), (1, 3072, 1024), (128, 1024, 1024), (128, 4096, 4096)];
/// `(rows, out, in)` of the quantized table: decode then prefill; the last is the tied output head
/// of Gemma 3 270M (a 262144-token vocabulary over 640 features), most of a decode step's bytes.
const QSHAPES: [(usize, usize, usize); 7] = [
    (1, 640, 2048),
    (1, 2048, 640),
    (1, 4096, 4096),
    (128, 640, 2048),
    (128, 2048, 640),
    (128, 4096, 4096),
    (1, 262144, 640),
];
/// Quantized types of the table: those of common GGUF files (Q4_K_M mixes the first four).
const QTYPES: [QuantType; 4] = [QuantType::Q4K, QuantType::Q6K, QuantType::Q8_0, QuantType::Q5_0];
/// Bytes of the rings that measure memory bandwidth and of the cold weight rotation: well past
/// the last-level cache.
const BIG: usize = 256 << 20;
/// Bytes moved per timed run of the bandwidth measures: short runs, like the decode calls.
const PIECE: usize = 8 << 20;

fn main() {
    let mut args = std::env::args().skip(1);
    let threads = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let which = args.next().unwrap_or_default();
    let only = args.next().unwrap_or_default();
    let cpu = CpuBackend::new(threads).expect("cpu backend");
    println!("tf-cpu matmul bench: {} threads, simd {}", cpu.threads(), cpu.simd().name());
    let pool = |n| ThreadPoolBuilder::new().num_threads(n).build().expect("thread pool");
    let (one, all) = (pool(1), pool(threads));
    let (copy1, copy) = (copy_gbs(&one), copy_gbs(&all));
    let read = read_gbs(&all);
    let peak = fma_peak_gflops(&all);
    let ipeak = int8_peak_gops(&all);
    println!("memcpy (cold), read + written: {copy1:.1} GB/s on 1 thread, {copy:.1} GB/s on {threads}");
    println!("read-only sum (cold, 8 streams a thread): {read:.1} GB/s on {threads} threads");
    println!("FMA-loop peak, f32: {peak:.1} GFLOP/s on {threads} threads");
    println!("maddubs+madd loop peak, 8-bit: {ipeak:.1} GOP/s on {threads} threads");
    let limits = Limits { read, copy };
    if which != "quant" {
        println!();
        header("dtype");
        for dtype in [DType::BF16, DType::F32, DType::Mxfp4] {
            for (rows, out, inp) in SHAPES {
                let bytes = random_bytes(dtype, out * inp);
                let mat = |data| HostMat { dtype, rows: out, cols: inp, data, scales: None };
                bench_shape(&cpu, dtype.name(), (rows, out, inp), &bytes, mat, peak, &limits);
            }
        }
    }
    if which != "float" {
        for acts in [QuantActs::Int8, QuantActs::F32] {
            let cpu =
                CpuBackend::with_options(CpuOptions { quant_acts: acts, ..CpuOptions::new(threads) }).expect("cpu");
            let peak = if acts == QuantActs::Int8 { ipeak } else { peak };
            println!();
            header(&format!("quant, {} activations", acts.name()));
            for q in QTYPES.into_iter().filter(|q| only.is_empty() || only.split(',').any(|n| n == q.name())) {
                for (rows, out, inp) in QSHAPES {
                    if !inp.is_multiple_of(q.block_len()) {
                        println!(
                            "{:<5} {:>15} (rows of {inp} are not whole {} blocks)",
                            q.name(),
                            format!("{rows}x{out}x{inp}"),
                            q.block_len()
                        );
                        continue;
                    }
                    let bytes = random_quant(q, out * inp);
                    let mat = |data| HostMat { dtype: DType::Quant(q), rows: out, cols: inp, data, scales: None };
                    bench_shape(&cpu, q.name(), (rows, out, inp), &bytes, mat, peak, &limits);
                }
            }
        }
    }
    println!();
    println!("Rates and limits use the best time (the machine may be shared); GB/s counts weights and");
    println!("activations once. GB/s/rd, GB/s/cp: against read-only and copy bandwidth (decode's limit);");
    println!("GFLOP/pk: against the FMA-loop peak, or the 8-bit peak for int8 activations (prefill's limit).");
}

/// The bandwidths measured at the start of the run, GB/s.
struct Limits {
    read: f64,
    copy: f64,
}

/// The column heads of a table whose first column is `first`.
fn header(first: &str) {
    println!("{first}");
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
}

/// Times one shape: "hot" on one weight, and for decode "cold" over copies past the caches.
fn bench_shape(
    cpu: &CpuBackend,
    name: &str,
    (rows, out, inp): (usize, usize, usize),
    bytes: &[u8],
    mat: impl Fn(TensorBytes) -> HostMat,
    peak: f64,
    l: &Limits,
) {
    let x = HostTensor { data: random(rows * inp, 7), rows, cols: inp };
    let copies = if rows == 1 { BIG.div_ceil(bytes.len()) } else { 1 };
    let ws: Vec<HostMat> = (0..copies).map(|_| mat(TensorBytes::from_vec(bytes))).collect();
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
            name,
            format!("{rows}x{out}x{inp}"),
            mode,
            t.median.as_secs_f64() * 1e3,
            t.spread * 100.0,
            secs * 1e3,
            flops,
            gbs,
            gbs / l.read,
            gbs / l.copy,
            flops / peak
        );
    }
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

/// Sustained 8-bit multiply-add rate as the integer path uses it (`maddubs`, `madd`, `add`: 32
/// multiply-adds, 64 operations), 12 independent chains on every thread of `pool`.
fn int8_peak_gops(pool: &ThreadPool) -> f64 {
    const ITERS: usize = 500_000;
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        let best = time(|| {
            // SAFETY: AVX2 was detected just above.
            black_box(pool.broadcast(|ctx| unsafe { int8_loop(ITERS, ctx.index() as i8) }));
        })
        .best;
        return (pool.current_num_threads() * ITERS * 12 * 64) as f64 / best.as_secs_f64() / 1e9;
    }
    let _ = pool;
    f64::NAN
}

/// `iters` rounds of 12 independent chains `acc += madd(maddubs(a, acc), 1)` (each round
/// depends on the last, so nothing leaves the loop).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn int8_loop(iters: usize, seed: i8) -> i32 {
    use std::arch::x86_64::*;
    let (a, ones) = (_mm256_set1_epi8(black_box(3)), _mm256_set1_epi16(1));
    let mut acc: [__m256i; 12] = std::array::from_fn(|i| _mm256_set1_epi8(seed.wrapping_add(i as i8)));
    for _ in 0..iters {
        for s in acc.iter_mut() {
            *s = _mm256_add_epi32(*s, _mm256_madd_epi16(_mm256_maddubs_epi16(a, *s), ones));
        }
    }
    acc.iter().map(|v| _mm256_extract_epi32::<0>(*v)).fold(0, i32::wrapping_add)
}

/// `n` weights of `q`: random codes, block scales of f16 values in (0, 2^-4].
fn random_quant(q: QuantType, n: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> =
        random(n / q.block_len() * q.block_bytes(), 13).iter().map(|v| v.to_bits() as u8).collect();
    let halves: &[usize] = match q {
        QuantType::Q2K => &[80, 82],
        QuantType::Q3K => &[108],
        QuantType::Q6K => &[208],
        QuantType::Q4_1 | QuantType::Q5_1 | QuantType::Q4K | QuantType::Q5K => &[0, 2],
        _ => &[0],
    };
    for block in bytes.chunks_exact_mut(q.block_bytes()) {
        for &at in halves {
            block[at..at + 2].copy_from_slice(&half::f16::from_f32(1.0 / 16.0 / (1 + at) as f32).to_le_bytes());
        }
    }
    bytes
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
        // Blocks of 32 codes taken from the values' bits, scales near 1.
        DType::Mxfp4 => v
            .chunks_exact(32)
            .flat_map(|c| {
                let codes: [u8; 32] = std::array::from_fn(|j| (c[j].to_bits() >> 7) as u8 & 0x0f);
                tf_formats::mxfp4::pack(&codes, 124 + (c[0].to_bits() % 4) as u8)
            })
            .collect(),
        _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}
