//! Temporary tuning harness: process CPU time per quantized matmul on one thread.
use std::hint::black_box;
use tf_backend::{Backend, HostMat, HostTensor};
use tf_core::{DType, QuantType};
use tf_cpu::{CpuBackend, CpuOptions, QuantActs};
use tf_formats::TensorBytes;

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}
unsafe extern "C" {
    fn clock_gettime(clk: i32, tp: *mut Timespec) -> i32;
}
fn cpu_ns() -> i64 {
    let mut t = Timespec { sec: 0, nsec: 0 };
    unsafe { clock_gettime(2, &mut t) };
    t.sec * 1_000_000_000 + t.nsec
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args[1] == "read" {
        let src: Vec<u64> = (0..(256u64 << 20) / 8).collect();
        let mut best = i64::MAX;
        for _ in 0..5 {
            let t = cpu_ns();
            let len = src.len() / 8;
            let mut acc = [0u64; 8];
            for j in 0..len {
                for (s, a) in acc.iter_mut().enumerate() {
                    *a = a.wrapping_add(src[s * len + j]);
                }
            }
            black_box(acc);
            best = best.min(cpu_ns() - t);
        }
        println!("read 1 thread: {:.1} GB/s", (256u64 << 20) as f64 / best as f64);
        return;
    }
    let q = match args[1].as_str() {
        "q4_k" => QuantType::Q4K,
        "q6_k" => QuantType::Q6K,
        "q8_0" => QuantType::Q8_0,
        "q5_0" => QuantType::Q5_0,
        "q2_k" => QuantType::Q2K,
        "q3_k" => QuantType::Q3K,
        "q5_k" => QuantType::Q5K,
        "q4_0" => QuantType::Q4_0,
        "q4_1" => QuantType::Q4_1,
        _ => QuantType::Q5_1,
    };
    let (m, n, k): (usize, usize, usize) =
        (args[2].parse().unwrap(), args[3].parse().unwrap(), args[4].parse().unwrap());
    let acts = if args.get(5).map(String::as_str) == Some("f32") { QuantActs::F32 } else { QuantActs::Int8 };
    let threads = args.get(6).map_or(1, |t| t.parse().unwrap());
    let cpu = CpuBackend::with_options(CpuOptions { quant_acts: acts, ..CpuOptions::new(threads) }).unwrap();
    let nbytes = n * k / q.block_len() * q.block_bytes();
    let mut s = 1u64;
    let mut bytes: Vec<u8> = (0..nbytes)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect();
    for b in bytes.chunks_exact_mut(q.block_bytes()) {
        let at = match q {
            QuantType::Q6K => 208,
            QuantType::Q2K => 80,
            QuantType::Q3K => 108,
            _ => 0,
        };
        b[at..at + 2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
    }
    let w = HostMat { dtype: DType::Quant(q), rows: n, cols: k, data: TensorBytes::from_vec(&bytes) };
    let x =
        HostTensor { data: (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect(), rows: m, cols: k };
    black_box(cpu.matmul(&x, &w));
    let reps = ((2e8 / (m * n * k) as f64) as usize).clamp(1, 2000);
    let mut best = i64::MAX;
    for _ in 0..15 {
        let t = cpu_ns();
        for _ in 0..reps {
            black_box(cpu.matmul(&x, &w));
        }
        best = best.min((cpu_ns() - t) / reps as i64);
    }
    let gops = 2.0 * (m * n * k) as f64 / best as f64;
    let mut wall = std::time::Duration::MAX;
    for _ in 0..300 {
        let t = std::time::Instant::now();
        black_box(cpu.matmul(&x, &w));
        wall = wall.min(t.elapsed());
    }
    println!("wall best {:.1} us on {} threads", wall.as_secs_f64() * 1e6, cpu.threads());
    println!(
        "{} {m}x{n}x{k} {}: {:.1} us cpu/call, {gops:.1} GOP/s per core, {:.1} GB/s per core",
        args[1],
        acts.name(),
        best as f64 / 1e3,
        nbytes as f64 / best as f64
    );
}
