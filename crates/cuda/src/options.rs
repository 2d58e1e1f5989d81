//! How the backend starts: the typed options a caller (the CLI) fills. The library reads no
//! environment; every developer switch is a field here.

use std::path::PathBuf;

/// How to start the backend.
#[derive(Clone, Debug, Default)]
pub struct CudaOptions {
    /// CUDA include directory handed to NVRTC (`$CUDA_HOME/include`); the kernels need no
    /// headers, so a missing directory is only an error when one is named explicitly.
    pub include_dir: Option<PathBuf>,
    /// Where compiled kernels are cached (none: compile at every start).
    pub cache_dir: Option<PathBuf>,
    /// Decode rounds always run op by op, never replayed from CUDA graphs (graph.rs).
    pub no_graphs: bool,
    /// Every kernel starts after the one before it ends, without programmatic launches (on
    /// sm_90 a kernel is otherwise scheduled while the one before it runs and waits for it in
    /// `tf_pdl_wait`): the same bits, slower; a result that changes with it is a race.
    pub no_pdl: bool,
    /// A tensor-parallel group's sums go through the host (download, sum, upload) instead of
    /// between the devices (exchange.rs); the same bits either way.
    pub tp_host_sums: bool,
    /// Each CUDA graph capture's outcome written to stderr (graph.rs).
    pub graph_log: bool,
    /// Most rows a recorded decode round has (none: 256); larger rounds run op by op.
    pub graph_rows: Option<usize>,
    /// Recorded decode rounds keep their own row count instead of being padded to their
    /// bucket's (graph_pad.rs): the same bits, more recordings.
    pub no_graph_pad: bool,
    /// A kernel timeline of rounds FROM..=TO (1-based, counted by picked-token rounds) written to
    /// `trace_out`; the kernels are then built with their timeline records (trace.rs).
    pub trace: Option<TraceRounds>,
    /// Where the timeline goes (none: `trace.tsv` in the working directory).
    pub trace_out: Option<PathBuf>,
    /// In a trace build, the place of the TMA GEMV's mark (kernels/gemv_tma.cu: `X` the x row
    /// landed, `S0` the first W stage landed, `SL` the first tile's last stage; none: the first
    /// tile's end).
    pub trace_mark: Option<TraceMark>,
    /// Prefill attention of head width 128 on Hopper runs the mma.sync kernel (attention.cu)
    /// instead of the wgmma one (attention_wg.cu): the same bits, for checking one against the
    /// other.
    pub mma_sync_attention: bool,
    /// When the wgmma GEMM splits K by segment (none: [`SplitRule::DEFAULT`]).
    pub gemm_split: Option<SplitRule>,
    /// Rows from which the wgmma GEMM applies the gated activation in its store (at least 33, the
    /// wgmma GEMM's first row count; none: 33, all of them).
    pub glu_store_rows: Option<usize>,
    /// Most rows an FP8 matmul takes the FP8 GEMV for (past 64, in launches of 64 rows, each
    /// reading the weight; 0: none, every FP8 matmul dequantizes into the scratch first; none:
    /// 64). The same bits either way.
    pub fp8_gemv_rows: Option<usize>,
    /// MoE rounds past the grouped GEMV's rows run each routed expert through the ordinary
    /// matmuls instead of one grouped wgmma GEMM a weight kind on Hopper (moe/grouped.rs, the
    /// default): the same bits.
    pub moe_per_expert: bool,
}

/// When the wgmma GEMM splits K by segment and folds the segment sums in order (the same bits
/// either way): at most `max_rows` rows, and fewer 128-row weight blocks than `below` times the
/// SM count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SplitRule {
    /// Most rows a split GEMM has.
    pub max_rows: usize,
    /// Weight blocks below this many times the SM count are split.
    pub below: f32,
}

impl SplitRule {
    /// Up to 64 rows, fewer weight blocks than SMs (H100, qwen3-8b and qwen3-30b-a3b: docs/perf.md).
    pub const DEFAULT: SplitRule = SplitRule { max_rows: 64, below: 1.0 };
}

impl std::str::FromStr for SplitRule {
    type Err = String;

    /// `ROWS:FACTOR`, with `FACTOR` finite and at least 0.
    fn from_str(v: &str) -> Result<SplitRule, String> {
        let bad = || format!("{v:?}: expected ROWS:FACTOR (e.g. 64:2)");
        let (a, b) = v.split_once(':').ok_or_else(bad)?;
        let max_rows = a.trim().parse::<usize>().map_err(|_| bad())?;
        let below = b.trim().parse::<f32>().map_err(|_| bad())?;
        if below.is_finite() && below >= 0.0 { Ok(SplitRule { max_rows, below }) } else { Err(bad()) }
    }
}

/// Most rows an FP8 GEMV launch takes (kernels/gemv_fp8.cu: 8 row groups of 8), and by default
/// the most rows an FP8 matmul takes it for (`Ctx::fp8_gemv_rows`).
pub(crate) const FP8_GEMV_ROWS: usize = 64;

/// Rows from which the wgmma GEMM applies the gated activation in its store by default
/// (`Ctx::glu_store_rows`; its launch never splits K): all of its rows. H100, qwen3-8b decode
/// against the product then `glu_packed` from 257 rows: batch 64 1.016x, 256 1.03x; H200
/// prefill from 257 tokens: 512 1.07x, 1024 1.12x, 4096 1.03x (docs/perf.md).
pub(crate) const GLU_STORE_MIN_ROWS: usize = 33;

/// The rounds a kernel timeline records, `from..=to` (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRounds {
    /// The first round recorded.
    pub from: usize,
    /// The last round recorded (the file is written when it ends).
    pub to: usize,
}

impl std::str::FromStr for TraceRounds {
    type Err = String;

    /// `FROM:TO`, with `1 <= FROM <= TO`.
    fn from_str(v: &str) -> Result<TraceRounds, String> {
        let bad = || format!("{v:?}: expected FROM:TO rounds with 1 <= FROM <= TO");
        let (a, b) = v.split_once(':').ok_or_else(bad)?;
        let (from, to) = (a.trim().parse::<usize>().map_err(|_| bad())?, b.trim().parse::<usize>().map_err(|_| bad())?);
        if from >= 1 && to >= from { Ok(TraceRounds { from, to }) } else { Err(bad()) }
    }
}

/// Where a trace build's TMA GEMV records its mark (kernels/gemv_tma.cu `TF_TRACE_MARK_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceMark {
    /// When the x row has landed.
    X,
    /// When the first W stage has landed.
    S0,
    /// When the first tile's last W stage has landed.
    SL,
}

impl TraceMark {
    /// The kernel source's name for the mark.
    pub(crate) fn define(self) -> &'static str {
        match self {
            TraceMark::X => "X",
            TraceMark::S0 => "S0",
            TraceMark::SL => "SL",
        }
    }
}

impl std::str::FromStr for TraceMark {
    type Err = String;

    /// `X`, `S0` or `SL`.
    fn from_str(v: &str) -> Result<TraceMark, String> {
        match v.trim() {
            "X" => Ok(TraceMark::X),
            "S0" => Ok(TraceMark::S0),
            "SL" => Ok(TraceMark::SL),
            other => Err(format!("{other:?}: expected X, S0 or SL")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_rounds_parse_or_are_refused() {
        assert_eq!("3:4".parse(), Ok(TraceRounds { from: 3, to: 4 }));
        assert_eq!(" 5 : 5".parse(), Ok(TraceRounds { from: 5, to: 5 }));
        for bad in ["", "3", "0:2", "4:3", "a:b", "1:2:3"] {
            assert!(bad.parse::<TraceRounds>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn split_rules_parse_or_are_refused() {
        assert_eq!("256:1".parse(), Ok(SplitRule { max_rows: 256, below: 1.0 }));
        assert_eq!(" 64 : 2.5".parse(), Ok(SplitRule { max_rows: 64, below: 2.5 }));
        for bad in ["", "64", "a:1", "64:-1", "64:nan", "64:inf"] {
            assert!(bad.parse::<SplitRule>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn trace_marks_parse_or_are_refused() {
        assert_eq!("S0".parse(), Ok(TraceMark::S0));
        assert_eq!(TraceMark::SL.define(), "SL");
        assert!("x".parse::<TraceMark>().is_err());
    }
}
