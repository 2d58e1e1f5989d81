//! `tensorfold session inspect FILE [--model M]`: checks a saved session file with the check a
//! restore makes (header, exact size, payload SHA-256, finite K/V; against a model when given)
//! and prints its header; a refused file exits 2 with one line.

use crate::args::{InspectArgs, SessionArgs, SessionCommand};
use crate::device::{OnBackend, dispatch};
use crate::exit::{Failure, refused};
use tf_backend::Backend;
use tf_engine::session::{self, SessionHeader, SessionLayout};
use tf_models::Model;

/// Checks the file against the model `--model` names, with the header's block size.
struct AgainstModel<'a>(&'a InspectArgs, SessionHeader);

impl OnBackend for AgainstModel<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, b: &B) -> Result<(), Failure> {
        let (a, h) = (self.0, self.1);
        let Some(dir) = &a.model else { return Ok(()) };
        let m = Model::open(dir, b).map_err(refused)?;
        let ctx = m.decoder.spec.max_position_embeddings;
        let layout = SessionLayout::of(&m, b, h.block_size, ctx).map_err(refused)?;
        session::read(&a.file, &layout).map(|_| ()).map_err(refused)
    }
}

/// Runs `session inspect`.
pub fn run(a: &SessionArgs) -> Result<(), Failure> {
    let SessionCommand::Inspect(a) = &a.command;
    let h = session::inspect(&a.file).map_err(refused)?;
    if a.model.is_some() {
        dispatch(&a.dev, AgainstModel(a, h.clone()))?;
    }
    println!("file: {}", a.file.display());
    println!("fingerprint: {:016x}", h.fingerprint);
    println!("kv dtype: {}", h.kv_dtype);
    println!("tokens: {}", h.num_tokens);
    println!("block size: {}", h.block_size);
    println!("tensor-parallel ranks: {}", h.ranks);
    println!("kv layers: {}, slot widths: {:?}", h.kv_widths.len(), h.kv_widths);
    println!("state layers: {} ({} bytes)", h.state.len(), h.state.iter().map(|s| s.slot_bytes()).sum::<usize>());
    let hex: String = h.digest.iter().map(|b| format!("{b:02x}")).collect();
    println!("sha-256: {hex} (verified)");
    if let Some(dir) = &a.model {
        println!("matches: {}", dir.display());
    }
    Ok(())
}
