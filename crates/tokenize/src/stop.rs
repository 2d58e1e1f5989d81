//! Stop strings over streamed text, with OpenAI's semantics: the output ends just before the
//! first stop string, and text that may still begin one is held back until it is decided.

/// What may be emitted after one piece, and whether a stop string was hit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopOutput {
    /// Text safe to emit now.
    pub text: String,
    /// Whether a stop string was hit; nothing more will be emitted.
    pub stopped: bool,
}

/// Watches streamed text for stop strings.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Length in bytes of the longest stop string.
    max_len: usize,
    /// Received text not emitted yet: a suffix that may begin a stop string.
    held: String,
    stopped: bool,
    /// The stop string that ends the text is emitted too.
    include: bool,
}

impl StopMatcher {
    /// A matcher for the given stop strings; empty ones are ignored.
    pub fn new<S: AsRef<str>>(stops: &[S]) -> StopMatcher {
        let stops: Vec<String> = stops.iter().map(|s| s.as_ref().to_string()).filter(|s| !s.is_empty()).collect();
        let max_len = stops.iter().map(String::len).max().unwrap_or(0);
        StopMatcher { stops, max_len, held: String::new(), stopped: false, include: false }
    }

    /// The same matcher, emitting the stop string that ends the text too when `include`
    /// (vLLM's `include_stop_str_in_output`).
    pub fn including(self, include: bool) -> StopMatcher {
        StopMatcher { include, ..self }
    }

    /// Whether a stop string has been hit.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Consumes one piece of streamed text.
    pub fn push(&mut self, piece: &str) -> StopOutput {
        if self.stopped {
            return StopOutput { text: String::new(), stopped: true };
        }
        self.held.push_str(piece);
        // The earliest stop string; of those starting there, the shortest (it is complete first).
        let hit = self.stops.iter().filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s.len()))).min();
        if let Some((at, len)) = hit {
            self.held.truncate(if self.include { at + len } else { at });
            self.stopped = true;
            return StopOutput { text: std::mem::take(&mut self.held), stopped: true };
        }
        let keep_from = self.partial_start();
        let rest = self.held.split_off(keep_from);
        StopOutput { text: std::mem::replace(&mut self.held, rest), stopped: false }
    }

    /// Flushes held-back text at the end of the stream (none if a stop string was hit).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }

    /// Start of the longest suffix of `held` that is a proper prefix of some stop string.
    fn partial_start(&self) -> usize {
        let earliest = self.held.len().saturating_sub(self.max_len.saturating_sub(1));
        self.held
            .char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= earliest)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.held[i..])))
            .unwrap_or(self.held.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds pieces; returns everything emitted (with the final flush) and whether it stopped.
    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops);
        let mut out = String::new();
        for piece in pieces {
            let step = m.push(piece);
            out += &step.text;
            assert_eq!(step.stopped, m.is_stopped());
        }
        out += &m.finish();
        (out, m.is_stopped())
    }

    #[test]
    fn an_included_stop_string_ends_the_text() {
        let mut m = StopMatcher::new(&["END", "E"]).including(true);
        let mut out = String::new();
        for piece in ["ab", "cE", "ND tail"] {
            out += &m.push(piece).text;
        }
        // "E" completes first (streamed, "END" was not whole yet): it is the one kept.
        assert_eq!(out, "abcE");
        let mut m = StopMatcher::new(&["END"]).including(true);
        assert_eq!(m.push("x END y").text, "x END");
        assert!(m.is_stopped());
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn stop_split_across_pieces() {
        assert_eq!(run(&["STOP"], &["abc S", "T", "OP and more"]), ("abc ".into(), true));
        assert_eq!(run(&["\n\n"], &["line\n", "\nnext"]), ("line".into(), true));
    }

    #[test]
    fn possible_start_is_held_then_released() {
        let mut m = StopMatcher::new(&["</end>"]);
        assert_eq!(m.push("text </e").text, "text ");
        assert_eq!(m.push("x").text, "</ex");
        assert_eq!(m.push(" <").text, " ");
        assert_eq!(m.finish(), "<");
        assert!(!m.is_stopped());
    }

    #[test]
    fn earliest_stop_wins_and_nothing_follows() {
        let mut m = StopMatcher::new(&["world", "lo w"]);
        let out = m.push("hello world");
        assert_eq!(out, StopOutput { text: "hel".into(), stopped: true });
        assert_eq!(m.push("more").text, "");
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn stop_at_start_and_unicode() {
        assert_eq!(run(&["世界"], &["世", "界 hi"]), ("".into(), true));
        assert_eq!(run(&["é!"], &["caf", "é", " é", "!"]), ("café ".into(), true));
        assert_eq!(run(&["é!"], &["café"]), ("café".into(), false));
    }

    #[test]
    fn no_stops_passes_everything_through() {
        let mut m = StopMatcher::new::<&str>(&[]);
        assert_eq!(m.push("abc").text, "abc");
        let mut m = StopMatcher::new(&[""]);
        assert_eq!(m.push("abc").text, "abc");
    }
}
