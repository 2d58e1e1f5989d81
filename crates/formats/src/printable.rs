//! Bytes a file controls, made safe to print in an error or a report: control characters,
//! invisible direction marks and invalid UTF-8 escaped, long values cut.

/// How many characters of a file-controlled name or value an error shows.
pub const SHOW_MAX: usize = 120;

/// `s` as one inert line of at most `max` characters plus `...` when cut: printable UTF-8 kept,
/// control and invalid bytes as `\xNN`, other invisible characters as `\u{NNNN}`, `\` as `\\`.
pub fn printable(s: &[u8], max: usize) -> String {
    let mut out = String::new();
    let mut shown = 0usize;
    for chunk in s.utf8_chunks() {
        let pieces =
            chunk.valid().chars().map(escape_char).chain(chunk.invalid().iter().map(|b| format!("\\x{b:02x}")));
        for piece in pieces {
            let len = piece.chars().count();
            if shown + len > max {
                out.push_str("...");
                return out;
            }
            shown += len;
            out.push_str(&piece);
        }
    }
    out
}

/// [`printable`] of a string with the usual [`SHOW_MAX`] cut.
pub fn show(s: &str) -> String {
    printable(s.as_bytes(), SHOW_MAX)
}

/// `s` with control and invisible characters escaped as [`printable`] does, nothing cut and
/// backslashes kept: a whole message whose file-controlled parts were already [`show`]n.
pub fn inert(s: &str) -> String {
    s.chars().map(|c| if c == '\\' { c.to_string() } else { escape_char(c) }).collect()
}

fn escape_char(c: char) -> String {
    match c {
        '\\' => "\\\\".to_string(),
        c if (c as u32) < 0x80 && c.is_control() => format!("\\x{:02x}", c as u32),
        c if c.is_control() || invisible(c) => format!("\\u{{{:04x}}}", c as u32),
        c => c.to_string(),
    }
}

/// Format characters a terminal draws as nothing or uses to reorder text (bidi overrides,
/// zero-width marks, the byte-order mark, line and paragraph separators).
fn invisible(c: char) -> bool {
    matches!(c as u32, 0xad | 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x206f | 0xfeff | 0xfff9..=0xfffb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(printable(b"model.layers.0.q_proj", 80), "model.layers.0.q_proj");
        assert_eq!(show("général ✓"), "général ✓");
    }

    #[test]
    fn control_bytes_are_escaped() {
        assert_eq!(printable(b"a\x1b[31mred\x00\n\x7f", 80), "a\\x1b[31mred\\x00\\x0a\\x7f");
        assert_eq!(printable("\u{85}x".as_bytes(), 80), "\\u{0085}x");
    }

    #[test]
    fn backslash_is_escaped_so_escapes_are_unambiguous() {
        assert_eq!(printable(b"\\x1b", 80), "\\\\x1b");
    }

    #[test]
    fn invalid_utf8_is_escaped_byte_by_byte() {
        assert_eq!(printable(b"ok\xff\xc3", 80), "ok\\xff\\xc3");
    }

    #[test]
    fn direction_overrides_are_escaped() {
        assert_eq!(show("a\u{202e}b\u{200b}c\u{feff}"), "a\\u{202e}b\\u{200b}c\\u{feff}");
    }

    #[test]
    fn inert_escapes_controls_but_keeps_backslashes_and_length() {
        let long = "y".repeat(500);
        let msg = format!("C:\\m ok\u{1b}[2J\n\u{202e}{long}");
        assert_eq!(inert(&msg), format!(r"C:\m ok\x1b[2J\x0a\u{{202e}}{long}"));
    }

    #[test]
    fn long_values_are_cut_without_splitting_an_escape() {
        assert_eq!(printable(b"abcdefgh", 5), "abcde...");
        assert_eq!(printable(b"abcdefgh", 8), "abcdefgh");
        assert_eq!(printable(b"abc\x00def", 5), "abc...");
        assert_eq!(show(&"x".repeat(10_000)).len(), SHOW_MAX + 3);
    }
}
