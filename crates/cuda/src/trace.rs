//! Kernel timeline in place, off unless `CudaOptions::trace` names rounds FROM..=TO: the kernels
//! are then built with `TF_TRACE` (kernels/common.cuh), so lane 0 of every warp records the global
//! timer at the kernel's start, when its launch wait returns, at an optional mark and at its end.
//! Rounds are counted by picked-token rounds (`argmax_rows`, `sample_candidates`, `held_ids`: one
//! a decode round); rounds FROM..=TO (1-based) are recorded and written as tab-separated lines to
//! `CudaOptions::trace_out` (default `trace.tsv`) when round TO ends.
//! scripts/device/trace_round.py reads the file. It shows what ncu cannot (kernels one at a time)
//! and Nsight Systems does not here: how the kernels of a round overlap and where the GPU waits.

use crate::device::{Device, ptr};
use crate::options::TraceRounds;
use cudarc::driver::CudaSlice;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of one record (kernels/common.cuh `TfTraceRec`).
const REC: usize = 56;
/// Records an SM can hold (lane 0 of each warp writes one): a whole 4096-token prefill of a
/// Qwen3-8B shape writes about 32k (16384 held 18 of its 36 layers).
const PER_SM: u32 = 40960;
/// SM ids the counters cover.
const SMS: usize = 256;

/// The trace buffer and the rounds counted so far.
pub(crate) struct Trace {
    rounds: TraceRounds,
    done: AtomicUsize,
    buf: CudaSlice<u8>,
    out: PathBuf,
}

impl Trace {
    /// Allocates the buffer and points the module's trace globals at it; the file goes to `out`.
    pub(crate) fn new(d: &Device, rounds: TraceRounds, out: PathBuf) -> Trace {
        let buf = d.zeros::<u8>(SMS * PER_SM as usize * REC);
        d.set_global("tf_trace_buf", &ptr(&buf, &d.stream).to_le_bytes());
        d.set_global("tf_trace_per_sm", &PER_SM.to_le_bytes());
        let t = Trace { rounds, done: AtomicUsize::new(0), buf, out };
        t.reset(d);
        t
    }

    fn reset(&self, d: &Device) {
        d.set_global("tf_trace_n", &[0u8; SMS * 4]);
    }

    /// Called after each round's `argmax_rows` download: resets before the first recorded round,
    /// writes the file after the last.
    pub(crate) fn round_done(&self, d: &Device) {
        let n = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if n + 1 == self.rounds.from {
            self.reset(d);
        } else if n == self.rounds.to
            && let Err(e) = self.write(d)
        {
            eprintln!("trace: writing {}: {e}", self.out.display());
        }
    }

    fn write(&self, d: &Device) -> std::io::Result<()> {
        let counts = d.get_global("tf_trace_n", SMS * 4);
        let all = d.download(&self.buf, self.buf.len());
        let mut f = std::io::BufWriter::new(std::fs::File::create(&self.out)?);
        writeln!(f, "name\tgrid\tblock\twarp\tsm\tt0\tt1\tdwait\tdmark")?;
        for sm in 0..SMS {
            let c = u32::from_le_bytes([counts[4 * sm], counts[4 * sm + 1], counts[4 * sm + 2], counts[4 * sm + 3]]);
            for i in 0..c.min(PER_SM) as usize {
                let r = &all[(sm * PER_SM as usize + i) * REC..][..REC];
                let u64_at = |o: usize| u64::from_le_bytes(r[o..o + 8].try_into().unwrap_or([0; 8]));
                let u32_at = |o: usize| u32::from_le_bytes(r[o..o + 4].try_into().unwrap_or([0; 4]));
                let name: String = r[36..56].iter().take_while(|&&b| b != 0).map(|&b| b as char).collect();
                let ws = u32_at(20);
                let (t0, t1, block, grid) = (u64_at(0), u64_at(8), u32_at(16), u32_at(24));
                let (dw, dm) = (u32_at(28), u32_at(32));
                writeln!(f, "{name}\t{grid}\t{block}\t{}\t{}\t{t0}\t{t1}\t{dw}\t{dm}", ws & 0xffff, ws >> 16)?;
            }
        }
        f.flush()?;
        eprintln!("trace: rounds {}..={} written to {}", self.rounds.from, self.rounds.to, self.out.display());
        Ok(())
    }
}
