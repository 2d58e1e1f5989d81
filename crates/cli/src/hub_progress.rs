//! A pull's progress on stderr: on a terminal a bar per file and one for the total (bytes, rate,
//! ETA), otherwise one line per file.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::io::IsTerminal;
use tf_hub::Progress;

/// Draws bars when stderr is a terminal, else prints a line per finished file.
pub struct Display {
    bars: Option<Bars>,
}

struct Bars {
    multi: MultiProgress,
    total: ProgressBar,
    files: HashMap<String, (ProgressBar, u64)>,
}

impl Display {
    /// Bars on a terminal, lines otherwise.
    pub fn new() -> Display {
        if !std::io::stderr().is_terminal() {
            return Display { bars: None };
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let total = multi.add(ProgressBar::new(0));
        total.set_style(style("{msg:>32} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}"));
        total.set_message("total");
        Display { bars: Some(Bars { multi, total, files: HashMap::new() }) }
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()).progress_chars("=> ")
}

/// The last 32 characters of a name, for a bar's label.
fn label(path: &str) -> String {
    let n = path.chars().count();
    if n <= 32 { path.to_string() } else { format!("…{}", path.chars().skip(n - 31).collect::<String>()) }
}

impl Progress for Display {
    fn plan(&mut self, files: &[(String, u64)]) {
        if let Some(b) = &mut self.bars {
            b.total.set_length(files.iter().map(|f| f.1).sum());
        }
    }

    fn position(&mut self, path: &str, size: u64, pos: u64) {
        let Some(b) = &mut self.bars else { return };
        let (multi, total) = (&b.multi, &b.total);
        let (bar, last) = b.files.entry(path.to_string()).or_insert_with(|| {
            let bar = multi.insert_before(total, ProgressBar::new(size));
            bar.set_style(style("{msg:>32} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}"));
            bar.set_message(label(path));
            (bar, 0)
        });
        bar.set_position(pos);
        if pos >= *last {
            total.inc(pos - *last);
        } else {
            total.set_position(total.position().saturating_sub(*last - pos));
        }
        *last = pos;
    }

    fn finished(&mut self, path: &str) {
        match &mut self.bars {
            Some(b) => {
                if let Some((bar, _)) = b.files.get(path) {
                    bar.finish();
                }
            }
            None => eprintln!("pulled {path}"),
        }
    }

    fn cached(&mut self, path: &str, size: u64) {
        match &mut self.bars {
            Some(b) => b.total.inc(size),
            None => eprintln!("cached {path}"),
        }
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        if let Some(b) = &self.bars {
            b.total.finish();
        }
    }
}
