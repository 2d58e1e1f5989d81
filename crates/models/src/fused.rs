//! Projections a checkpoint stores fused, served under the names the shared blocks load: Phi-3's
//! `qkv_proj` as `q_proj`, `k_proj` and `v_proj`, its `gate_up_proj` as `gate_proj` and
//! `up_proj`. Each part is a run of the fused weight's rows (a float weight: the run's bytes),
//! so sharding, shape checks and the unused-tensor check see ordinary tensors.

use crate::error::ModelError;
use crate::weights::TensorSource;
use tf_formats::{TensorBytes, TensorView};

/// One fused weight of every layer: its name within a layer and its parts' names and rows, in
/// row order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusedRows {
    /// The fused weight (`self_attn.qkv_proj.weight`).
    pub fused: &'static str,
    /// Each part's name and rows (`self_attn.q_proj.weight`, heads x head width).
    pub parts: Vec<(&'static str, usize)>,
}

/// A tensor source serving the parts of fused weights by name.
pub struct FusedSource<'a> {
    inner: &'a dyn TensorSource,
    fused: &'a [FusedRows],
}

impl<'a> FusedSource<'a> {
    /// `inner` with `fused`'s weights served as their parts.
    pub fn new(inner: &'a dyn TensorSource, fused: &'a [FusedRows]) -> FusedSource<'a> {
        FusedSource { inner, fused }
    }

    /// The fused weight holding part `name`, with the part's first row and rows.
    fn locate(&self, name: &str) -> Option<(String, usize, usize)> {
        for f in self.fused {
            let mut first = 0;
            for &(part, rows) in &f.parts {
                if let Some(prefix) = name.strip_suffix(part).filter(|p| p.is_empty() || p.ends_with('.')) {
                    return Some((format!("{prefix}{}", f.fused), first, rows));
                }
                first += rows;
            }
        }
        None
    }
}

impl TensorSource for FusedSource<'_> {
    fn get(&self, name: &str) -> Result<Option<TensorView>, ModelError> {
        let Some((fused, first, rows)) = self.locate(name) else { return self.inner.get(name) };
        let Some(t) = self.inner.get(&fused)? else { return Ok(None) };
        let bad = |msg: String| ModelError::Dtype { file: t.file.clone(), tensor: fused.clone(), msg };
        let [all, cols] = t.shape[..] else { return Err(bad(format!("a fused weight of shape {:?}", t.shape))) };
        if !t.dtype.is_float() {
            return Err(bad(format!("dtype {} cannot be split into its parts (a float type is needed)", t.dtype)));
        }
        let total: usize =
            self.fused.iter().find(|f| fused.ends_with(f.fused)).map_or(0, |f| f.parts.iter().map(|p| p.1).sum());
        if all != total {
            return Err(bad(format!("{all} rows, the config's parts {total}")));
        }
        let row = cols * t.dtype.size();
        let bytes = t.data.as_bytes().get(first * row..(first + rows) * row).ok_or_else(|| bad("short data".into()))?;
        let data = TensorBytes::from_vec(bytes);
        Ok(Some(TensorView { name: name.to_string(), dtype: t.dtype, shape: vec![rows, cols], data, file: t.file }))
    }

    fn contains(&self, name: &str) -> bool {
        match self.locate(name) {
            Some((fused, _, _)) => self.inner.contains(&fused),
            None => self.inner.contains(name),
        }
    }

    fn names(&self) -> Option<Vec<String>> {
        let mut out = Vec::new();
        for name in self.inner.names()? {
            match self
                .fused
                .iter()
                .find(|f| name.strip_suffix(f.fused).is_some_and(|p| p.is_empty() || p.ends_with('.')))
            {
                Some(f) => {
                    let prefix = &name[..name.len() - f.fused.len()];
                    out.extend(f.parts.iter().map(|(part, _)| format!("{prefix}{part}")));
                }
                None => out.push(name),
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use tf_core::DType;

    /// Named f32 tensors.
    struct Map(BTreeMap<String, (Vec<usize>, Vec<f32>)>);

    impl TensorSource for Map {
        fn get(&self, name: &str) -> Result<Option<TensorView>, ModelError> {
            Ok(self.0.get(name).map(|(shape, v)| TensorView {
                name: name.to_string(),
                dtype: DType::F32,
                shape: shape.clone(),
                data: TensorBytes::from_vec(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()),
                file: PathBuf::from("m.safetensors"),
            }))
        }
        fn contains(&self, name: &str) -> bool {
            self.0.contains_key(name)
        }
        fn names(&self) -> Option<Vec<String>> {
            Some(self.0.keys().cloned().collect())
        }
    }

    #[test]
    fn parts_are_runs_of_the_fused_rows_under_their_own_names() {
        let rows: Vec<f32> = (0..7 * 2).map(|i| i as f32).collect();
        let mut m = BTreeMap::new();
        m.insert("model.layers.0.self_attn.qkv_proj.weight".to_string(), (vec![7, 2], rows));
        m.insert("model.norm.weight".to_string(), (vec![2], vec![1.0, 1.0]));
        let inner = Map(m);
        let fused = [FusedRows {
            fused: "self_attn.qkv_proj.weight",
            parts: vec![("self_attn.q_proj.weight", 3), ("self_attn.k_proj.weight", 2), ("self_attn.v_proj.weight", 2)],
        }];
        let src = FusedSource::new(&inner, &fused);
        let k = src.get("model.layers.0.self_attn.k_proj.weight").unwrap().unwrap();
        assert_eq!((k.shape.clone(), k.data.to_f32(DType::F32)), (vec![2, 2], vec![6.0, 7.0, 8.0, 9.0]));
        assert!(src.contains("model.layers.0.self_attn.v_proj.weight"));
        assert!(!src.contains("model.layers.1.self_attn.v_proj.weight"));
        assert!(src.get("model.norm.weight").unwrap().is_some(), "other tensors pass through");
        let names = src.names().unwrap();
        assert!(names.contains(&"model.layers.0.self_attn.q_proj.weight".to_string()));
        assert!(!names.iter().any(|n| n.contains("qkv_proj")), "{names:?}");
        // The config's parts disagreeing with the fused rows.
        let wrong = [FusedRows { fused: fused[0].fused, parts: vec![("self_attn.q_proj.weight", 4), ("x", 4)] }];
        let e = FusedSource::new(&inner, &wrong).get("model.layers.0.self_attn.q_proj.weight").unwrap_err();
        assert!(e.to_string().contains("7 rows, the config's parts 8"), "{e}");
    }
}
