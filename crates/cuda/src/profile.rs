//! Profiling knobs, off unless set: `TF_PROFILE_SKIP` (a bit mask) leaves chosen ops of rounds of
//! at most 64 rows out, their outputs unwritten (results are wrong), so that
//! scripts/device/skip.sh can time what each op costs in place, launch overlap included;
//! `TF_LAB_M1` (or `CudaOptions::lab_m1`) turns on the one-row GEMV and picks its schedule
//! (results stay exact) for variant timings; `TF_GEMV_TUNE`, `TF_PDL_OFF`, `TF_PAD_SMEM` and
//! `TF_CARVEOUT` set launch schedules (exact too; `TF_PAD_SMEM`'s default, padding on Hopper, is on).

/// The ops `TF_PROFILE_SKIP` leaves out.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Skip(u32);

impl Skip {
    /// Attention (with its KV write).
    pub(crate) const ATTENTION: u32 = 1;
    /// The RMSNorms: the fused residual add and norm, and the norms made for matmuls (the
    /// decode norms since the residual add moved into the matmul stores; before session 10 this
    /// bit skipped only add_rms_norm, which Qwen3 decode no longer runs).
    pub(crate) const ADD_NORM: u32 = 2;
    /// The gated activation (also the packed one after a gate/up matmul).
    pub(crate) const GLU: u32 = 4;
    /// The q/k norms and RoPE.
    pub(crate) const QK_ROPE: u32 = 8;
    /// Matmuls, except of weights with at least 100000 rows (the vocabulary head).
    pub(crate) const MATMUL: u32 = 16;

    /// The mask from the environment (none when unset or not a number).
    pub(crate) fn from_env() -> Skip {
        Skip(std::env::var("TF_PROFILE_SKIP").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// Whether no op is left out.
    pub(crate) fn is_none(self) -> bool {
        self.0 == 0
    }

    /// Whether an op of kind `bit` on `rows` rows is left out.
    pub(crate) fn skips(self, bit: u32, rows: usize) -> bool {
        self.0 & bit != 0 && rows <= 64
    }
}

/// Stages of W each warp of a TMA GEMV loads before its launch wait (kernels/gemv_tma.cu; the
/// rest of its ring's first stages follow the wait): `TF_GEMV_PRE=N` overrides `default`.
/// Scheduling only, the same bits either way.
pub(crate) fn gemv_pre_from_env(default: usize) -> usize {
    std::env::var("TF_GEMV_PRE").ok().and_then(|v| v.trim().parse::<usize>().ok()).unwrap_or(default).min(64)
}

/// `TF_GEMV_TUNE`: per TMA GEMV launch shape, the blocks and the W stages loaded before the launch
/// wait, as `TILESxKT:gG:pP[:n]` rules joined by commas (TILES the launch's 16-row W tiles, KT its
/// 16-wide k tiles, 0 for any; `g` and `p` each optional; `n`: a one-row launch of that shape takes
/// gemv_tma_n1, the x-box kernel, instead of gemv_tma_xr). Scheduling only, the same bits either way.
#[derive(Clone, Debug, Default)]
pub(crate) struct GemvTune(Vec<TuneRule>);

/// One `TF_GEMV_TUNE` rule: the launch shape it matches (0: any) and what it sets.
#[derive(Clone, Debug)]
struct TuneRule {
    tiles: usize,
    kt: usize,
    grid: Option<usize>,
    pre: Option<usize>,
    x_box: bool,
}

impl GemvTune {
    /// The rules in `v` (malformed rules are left out).
    pub(crate) fn parse(v: &str) -> GemvTune {
        let rule = |r: &str| {
            let mut parts = r.split(':');
            let (t, k) = parts.next()?.split_once('x')?;
            let mut rule = TuneRule {
                tiles: t.trim().parse().ok()?,
                kt: k.trim().parse().ok()?,
                grid: None,
                pre: None,
                x_box: false,
            };
            for part in parts {
                match part.split_at_checked(1)? {
                    ("g", n) => rule.grid = Some(n.parse::<usize>().ok()?.max(1)),
                    ("p", n) => rule.pre = Some(n.parse::<usize>().ok()?.min(64)),
                    ("n", "") => rule.x_box = true,
                    _ => return None,
                }
            }
            Some(rule)
        };
        GemvTune(v.split(',').filter_map(rule).collect())
    }

    /// The rules from the environment (none when unset).
    pub(crate) fn from_env() -> GemvTune {
        GemvTune::parse(&std::env::var("TF_GEMV_TUNE").unwrap_or_default())
    }

    /// Blocks (at most `grid`) and stages before the wait (else `pre`) of a launch of `tiles` W
    /// tiles and `kt` k tiles: the first rule that matches.
    pub(crate) fn pick(&self, tiles: usize, kt: usize, grid: usize, pre: usize) -> (usize, usize) {
        match self.rule(tiles, kt) {
            Some(r) => (r.grid.map_or(grid, |g| g.min(grid)), r.pre.unwrap_or(pre)),
            None => (grid, pre),
        }
    }

    /// Whether a one-row launch of `tiles` W tiles and `kt` k tiles takes the x-box kernel.
    pub(crate) fn x_box(&self, tiles: usize, kt: usize) -> bool {
        self.rule(tiles, kt).is_some_and(|r| r.x_box)
    }

    /// The first rule matching a launch of `tiles` W tiles and `kt` k tiles.
    fn rule(&self, tiles: usize, kt: usize) -> Option<&TuneRule> {
        self.0.iter().find(|r| (r.tiles == 0 || r.tiles == tiles) && (r.kt == 0 || r.kt == kt))
    }
}

/// The small decode kernels whose launches the knobs below name.
pub(crate) const SMALL_KERNELS: [&str; 3] = ["qk_norm_rope", "rms_norm_j4", "glu_packed"];

/// The small kernels named in `list` (comma-separated).
fn small_named(list: &str) -> Vec<&'static str> {
    SMALL_KERNELS.iter().copied().filter(|n| list.split(',').any(|o| o.trim() == *n)).collect()
}

/// The padding of small one-row kernels (device.rs `small_smem`) from `TF_PAD_SMEM`
/// (`BYTES:NAME,...`, `0:` none; at most 48 KB): bytes and the kernels named; unset, `default`
/// bytes for every small kernel where the padding applies (`on`: Hopper), else none.
pub(crate) fn pad_setting(env: Option<&str>, on: bool, default: u32) -> (u32, Vec<&'static str>) {
    match env {
        _ if !on => (0, Vec::new()),
        None => (default, SMALL_KERNELS.to_vec()),
        Some(v) => match v.split_once(':') {
            Some((bytes, list)) => (bytes.trim().parse::<u32>().unwrap_or(0).min(48 * 1024), small_named(list)),
            None => (0, Vec::new()),
        },
    }
}

/// `TF_CARVEOUT`: the shared-memory carveout every kernel prefers, in percent of the largest
/// (0-100; `-1`, the driver's default, and anything else: left alone). A lab knob: an SM whose
/// kernels prefer different carveouts reconfigures between them (same bits).
pub(crate) fn carveout_setting(env: Option<&str>) -> Option<i32> {
    env?.trim().parse::<i32>().ok().filter(|p| (0..=100).contains(p))
}

/// The small kernels `TF_PDL_OFF` (`NAME,...`) launches without programmatic dependent launch.
pub(crate) fn pdl_off_setting(env: Option<&str>) -> Vec<&'static str> {
    small_named(env.unwrap_or_default())
}

/// `TF_LAB_M1`: the one-row GEMV of kernels/gemv_m1.cu, with the input norm fused (opt-in: on the
/// H200 it ran slower than the few-row GEMV with a norm kernel; scripts/device/results/NOTES.md,
/// "Session 6"). Unset or malformed: off. `on`: at most three blocks an SM, stages by shape;
/// `BxS`: at most B blocks an SM (1-3), S ring stages (3 or 4; the fused norm always runs 3).
/// `row:NAME` instead keeps that kernel off and gives one-row calls a variant of the few-row GEMV
/// with one x row a stage (kernels/gemm.cu `GEMV_ONE_ROW`). `cp` gives one-row calls the few-row
/// GEMV itself (the default before the TMA GEMV took them), `cphead` only the vocabulary head's.
/// `attn-mma` gives prefill attention the mma.sync kernel (kernels/attention.cu) on Hopper too;
/// `gemm:L:O` sets the wgmma GEMM's warpgroup lag and tile order (kernels/gemm_wgmma.cu);
/// `glu-apart` keeps the gated activation out of every matmul's store, `glu-one` puts it in the
/// one-row TMA GEMV's store too (the default keeps one row apart); `tma-n1` gives one-row calls
/// the TMA GEMV with an x box a stage (gemv_tma_n1) instead of the row held in shared memory
/// (gemv_tma_xr, the default since session 20; `tma-xr` names the default).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct M1Lab {
    /// The one-row GEMV runs.
    pub(crate) on: bool,
    /// Blocks an SM at most.
    pub(crate) blocks: Option<usize>,
    /// Ring stages.
    pub(crate) stages: Option<usize>,
    /// `row:NAME`: a one-row variant of the few-row GEMV (matmul.rs `ROW_VARIANTS`, by index).
    pub(crate) row: Option<usize>,
    /// `cp`: one-row calls take the cp.async few-row GEMV instead of the TMA GEMV (Hopper).
    pub(crate) cp: bool,
    /// `cphead`: only the vocabulary head's one-row call takes it.
    pub(crate) cp_head: bool,
    /// `attn-mma`: prefill attention takes the mma.sync kernel instead of the wgmma one (Hopper).
    pub(crate) attn_mma: bool,
    /// `gemm:L:O`: the wgmma GEMM's warpgroup lag (k blocks, 0-4) and tile order (1: token tiles
    /// fastest, 0: W blocks fastest) instead of the defaults.
    pub(crate) gemm: Option<(i32, i32)>,
    /// `glu-apart`: packed gate/up matmuls never apply the activation in a matmul's store (the
    /// TMA GEMV's or the wgmma GEMM's): the product, then `glu_packed`.
    pub(crate) glu_apart: bool,
    /// `glu-one`: one-row packed gate/up matmuls apply the activation in the TMA GEMV's store too.
    pub(crate) glu_one: bool,
    /// `tma-n1`: one-row calls take gemv_tma_n1 instead of gemv_tma_xr (Hopper).
    pub(crate) tma_n1: bool,
}

impl M1Lab {
    /// The setting `v` (from `CudaOptions` or the environment).
    pub(crate) fn parse(v: &str) -> M1Lab {
        if let Some(g) = v.strip_prefix("gemm:") {
            let mut it = g.split(':').map(|p| p.parse::<i32>().ok());
            if let (Some(Some(l)), Some(Some(o)), None) = (it.next(), it.next(), it.next())
                && (0..=4).contains(&l)
                && (0..=1).contains(&o)
            {
                return M1Lab { gemm: Some((l, o)), ..M1Lab::default() };
            }
            return M1Lab::default();
        }
        if let Some(name) = v.strip_prefix("row:") {
            let row = crate::matmul::ROW_VARIANTS.iter().position(|r| r.0 == name);
            return M1Lab { row, ..M1Lab::default() };
        }
        match v {
            "on" => return M1Lab { on: true, ..M1Lab::default() },
            "cp" => return M1Lab { cp: true, ..M1Lab::default() },
            "cphead" => return M1Lab { cp_head: true, ..M1Lab::default() },
            "attn-mma" => return M1Lab { attn_mma: true, ..M1Lab::default() },
            "glu-apart" => return M1Lab { glu_apart: true, ..M1Lab::default() },
            "glu-one" => return M1Lab { glu_one: true, ..M1Lab::default() },
            "tma-n1" => return M1Lab { tma_n1: true, ..M1Lab::default() },
            "tma-xr" => return M1Lab::default(),
            _ => {}
        }
        let mut it = v.split('x').map(|p| p.parse::<usize>().ok());
        match (it.next().flatten(), it.next().flatten(), it.next()) {
            (Some(b), Some(s), None) if (1..=3).contains(&b) && (3..=4).contains(&s) => {
                M1Lab { on: true, blocks: Some(b), stages: Some(s), ..M1Lab::default() }
            }
            _ => M1Lab::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_kernel_padding_defaults_on_hopper_and_parses() {
        assert_eq!(pad_setting(None, true, 40960), (40960, SMALL_KERNELS.to_vec()));
        assert_eq!(pad_setting(None, false, 40960), (0, vec![]), "no padding off Hopper");
        assert_eq!(pad_setting(Some("0:"), true, 40960), (0, vec![]));
        assert_eq!(pad_setting(Some("32768:glu_packed, nope"), true, 40960), (32768, vec!["glu_packed"]));
        assert_eq!(pad_setting(Some("99999:rms_norm_j4"), true, 0).0, 48 * 1024, "capped at the launch limit");
        assert_eq!(pad_setting(Some("junk"), true, 40960), (0, vec![]));
        assert_eq!(pdl_off_setting(Some("qk_norm_rope,glu_packed")), vec!["qk_norm_rope", "glu_packed"]);
        assert!(pdl_off_setting(None).is_empty());
    }

    #[test]
    fn carveout_takes_a_percentage_or_nothing() {
        assert_eq!(carveout_setting(Some(" 100")), Some(100));
        assert_eq!(carveout_setting(Some("0")), Some(0));
        for off in [None, Some("-1"), Some("101"), Some("max"), Some("")] {
            assert_eq!(carveout_setting(off), None, "{off:?}");
        }
    }

    #[test]
    fn gemv_tune_rules_pick_by_shape() {
        let t = GemvTune::parse("256x256:g128:p10,1536x0:g128,0x768:p3,bad,9x9:q1");
        assert_eq!(t.pick(256, 256, 132, 7), (128, 10));
        assert_eq!(t.pick(1536, 256, 132, 7), (128, 7));
        assert_eq!(t.pick(256, 768, 132, 7), (132, 3));
        assert_eq!(t.pick(9496, 256, 132, 7), (132, 7));
        assert_eq!(t.pick(9, 9, 132, 7), (132, 7), "a rule with an unknown key is left out");
        assert_eq!(GemvTune::parse("").pick(256, 256, 132, 7), (132, 7));
        let o = GemvTune::parse("256x256:g124:n,256x768:p5");
        assert!(o.x_box(256, 256) && !o.x_box(256, 768) && !o.x_box(1536, 256));
        assert_eq!(o.pick(256, 256, 132, 7), (124, 7));
        assert!(GemvTune::parse("256x256:nx").0.is_empty(), "n takes no value");
    }

    #[test]
    fn lab_settings_parse_or_stay_off() {
        let l = M1Lab::parse("on");
        assert_eq!((l.on, l.blocks, l.stages), (true, None, None));
        let l = M1Lab::parse("2x4");
        assert_eq!((l.on, l.blocks, l.stages), (true, Some(2), Some(4)));
        assert_eq!(M1Lab::parse("row:u2s4").row, Some(3));
        assert!(!M1Lab::parse("row:u2s4").on);
        assert!(M1Lab::parse("cp").cp && !M1Lab::parse("cp").on);
        assert!(M1Lab::parse("cphead").cp_head && !M1Lab::parse("cphead").cp);
        assert!(M1Lab::parse("attn-mma").attn_mma && !M1Lab::parse("cp").attn_mma);
        assert_eq!(M1Lab::parse("gemm:4:0").gemm, Some((4, 0)));
        assert_eq!(M1Lab::parse("gemm:5:0").gemm, None);
        assert_eq!(M1Lab::parse("gemm:1").gemm, None);
        assert_eq!(M1Lab::parse("row:nope").row, None);
        assert!(M1Lab::parse("glu-apart").glu_apart && !M1Lab::parse("on").glu_apart);
        assert!(M1Lab::parse("glu-one").glu_one && !M1Lab::parse("glu-apart").glu_one);
        assert!(M1Lab::parse("tma-n1").tma_n1 && !M1Lab::parse("cp").tma_n1 && !M1Lab::parse("tma-xr").tma_n1);
        for bad in ["", "off", "5x3", "2x9", "x", "2", "2x3x1"] {
            let l = M1Lab::parse(bad);
            assert_eq!((l.on, l.blocks, l.stages), (false, None, None), "{bad:?}");
        }
    }
}
