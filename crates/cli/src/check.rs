//! `tensorfold check`: load and validate a checkpoint, print what it is. What the file controls
//! reaches the terminal escaped (`tf_formats::printable`), never as raw bytes.

use crate::args::CheckArgs;
use crate::device::{OnBackend, dispatch};
use crate::exit::{Failure, refused};
use tf_backend::Backend;
use tf_models::Model;

struct Check<'a>(&'a CheckArgs);

impl OnBackend for Check<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, b: &B) -> Result<(), Failure> {
        let m = Model::open(&self.0.model, b).map_err(|e| refused(tf_formats::inert(&e.to_string())))?;
        let s = &m.decoder.spec;
        println!(
            "ok: {} layers={} hidden={} heads={}/{} head_dim={} vocab={} tokenizer={} eos={:?}",
            tf_formats::show(&s.architecture),
            s.num_layers,
            s.hidden_size,
            s.num_heads,
            s.num_kv_heads,
            s.head_dim,
            m.vocab.rows(),
            m.tokenizer.as_ref().map_or(0, |t| t.len()),
            m.eos_ids
        );
        Ok(())
    }
}

/// Runs `check`.
pub fn run(a: &CheckArgs) -> Result<(), Failure> {
    dispatch(&a.dev, Check(a))
}
