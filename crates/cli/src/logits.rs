//! `tensorfold logits`: the logits at every position of the given ids, as safetensors.

use crate::args::{LogitsArgs, parse_ids};
use crate::device::{OnBackend, dispatch};
use crate::exit::{Failure, failed, refused};
use safetensors::tensor::{Dtype, TensorView};
use tf_backend::Backend;
use tf_engine::Runner;
use tf_models::Model;

struct Logits<'a>(&'a LogitsArgs);

impl OnBackend for Logits<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, b: &B) -> Result<(), Failure> {
        let a = self.0;
        let raw = parse_ids(&a.ids).map_err(refused)?;
        let m = Model::open(&a.model, b).map_err(refused)?;
        let ids = m.vocab.check(&raw).map_err(|e| refused(format!("--ids: {e}")))?;
        if ids.is_empty() {
            return Err(refused("--ids: no ids given"));
        }
        let max = m.decoder.spec.max_position_embeddings;
        if ids.len() > max {
            return Err(refused(format!("--ids: {} ids exceed the context length {max}", ids.len())));
        }
        let mut runner = Runner::new(&m, b, ids.len()).map_err(refused)?;
        let logits = runner.prefill(&ids, a.chunk, true);
        let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = TensorView::new(Dtype::F32, vec![ids.len(), m.vocab.rows()], &bytes).map_err(failed)?;
        safetensors::serialize_to_file([("logits", view)], None, &a.out).map_err(failed)?;
        Ok(())
    }
}

/// Runs `logits`.
pub fn run(a: &LogitsArgs) -> Result<(), Failure> {
    dispatch(&a.dev, Logits(a))
}
