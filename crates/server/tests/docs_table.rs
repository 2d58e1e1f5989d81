//! `docs/serve.md` holds the table of every `serve` switch, generated from the clap definitions:
//! this test fails when the table is stale. `UPDATE_DOCS=1 cargo test -p tf-server --test
//! docs_table` rewrites it.

use std::path::Path;

const BEGIN: &str = "<!-- options:begin (generated from crates/server/src/options.rs) -->\n";
const END: &str = "<!-- options:end -->";

#[test]
fn options_table_in_docs_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/serve.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc.find(BEGIN).expect("docs/serve.md lacks the options:begin marker") + BEGIN.len();
    let end = doc[start..].find(END).expect("docs/serve.md lacks the options:end marker") + start;
    let want = tf_server::options_table();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, format!("{}{want}{}", &doc[..start], &doc[end..])).unwrap();
        return;
    }
    assert!(
        doc[start..end] == want,
        "docs/serve.md's options table is stale; run UPDATE_DOCS=1 cargo test -p tf-server --test docs_table\n\
         expected:\n{want}"
    );
}
