//! How `ctl` prints: tables sized to the terminal, colour only on a terminal and never with
//! `NO_COLOR`, and the API's own JSON (or the same as YAML) for scripts.

use std::io::IsTerminal;

use serde_json::Value;

/// Where the output goes: whether it may be coloured, and how wide it may be.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    colour: bool,
    width: Option<usize>,
}

impl Style {
    /// Colour on a terminal unless `NO_COLOR` is set (to anything but empty, as no-color.org
    /// says); the terminal's width, or none when the output is not a terminal.
    pub fn detect() -> Self {
        let terminal = std::io::stdout().is_terminal();
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self {
            colour: terminal && !no_colour,
            width: terminal
                .then(|| terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)))
                .flatten(),
        }
    }

    /// A state's word, coloured as the status page colours it.
    pub fn state(&self, state: &str) -> String {
        let code = match state {
            "UP" => "32",
            "DEGRADED" => "33",
            "DOWN" => "31",
            "MAINTENANCE" => "35",
            "PROBING" => "36",
            _ => return state.to_owned(),
        };
        if self.colour {
            format!("\x1b[{code}m{state}\x1b[0m")
        } else {
            state.to_owned()
        }
    }
}

/// A table: a header and rows of cells. One column may be marked as the state's, to colour.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    state_column: Option<usize>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: Vec<&'static str>) -> Self {
        Self {
            header,
            rows: Vec::new(),
            state_column: None,
        }
    }

    /// Colours column `index` as a state.
    pub fn state_column(mut self, index: usize) -> Self {
        self.state_column = Some(index);
        self
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text: columns padded to their widest cell, two spaces apart; when the
    /// terminal is narrower, the last column is cut to fit, with `…`.
    pub fn render(&self, style: Style) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let before_last: usize = widths[..columns - 1].iter().map(|w| w + 2).sum();
        let last = style.width.map_or(widths[columns - 1], |w| {
            w.saturating_sub(before_last).max(8)
        });
        let mut out = String::new();
        let header: Vec<String> = self.header.iter().map(|h| (*h).to_owned()).collect();
        for (n, row) in std::iter::once(&header).chain(&self.rows).enumerate() {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate().take(columns) {
                let text = if i == columns - 1 {
                    cut(cell, last)
                } else {
                    cell.clone()
                };
                let pad = if i == columns - 1 {
                    0
                } else {
                    widths[i] + 2 - text.chars().count()
                };
                if n > 0 && Some(i) == self.state_column {
                    line.push_str(&style.state(&text));
                } else {
                    line.push_str(&text);
                }
                line.push_str(&" ".repeat(pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `text` in at most `width` characters, ending in `…` when cut.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `value` as pretty JSON, the API's own shape: what scripts read.
pub fn json(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// `value` as YAML.
pub fn yaml(value: &Value) -> String {
    serde_saphyr::to_string(value).unwrap_or_default()
}

/// A cell for an optional field: `-` when absent.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

/// A score as two decimals, `-` while unknown.
pub fn score(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".to_owned(), |s| format!("{s:.2}"))
}

/// How long ago an RFC 3339 time was, in the largest unit (`5m`, `3h`, `2d`); `-` for none.
pub fn ago(value: &Value, now: std::time::SystemTime) -> String {
    let Some(at) = value
        .as_str()
        .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
    else {
        return "-".to_owned();
    };
    let secs = now.duration_since(at).map_or(0, |d| d.as_secs());
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86_400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(width: Option<usize>) -> Style {
        Style {
            colour: false,
            width,
        }
    }

    #[test]
    fn columns_line_up_and_the_last_is_cut_to_the_terminal() {
        let mut table = Table::new(vec!["ID", "STATE", "REASON"]).state_column(1);
        table.row(vec![
            "db".into(),
            "DOWN".into(),
            "connect refused by the host".into(),
        ]);
        table.row(vec!["web-1".into(), "UP".into(), "-".into()]);
        assert_eq!(
            table.render(plain(None)),
            "ID     STATE  REASON\ndb     DOWN   connect refused by the host\nweb-1  UP     -\n"
        );
        assert_eq!(
            table.render(plain(Some(24))),
            "ID     STATE  REASON\ndb     DOWN   connect r…\nweb-1  UP     -\n"
        );
        let coloured = Style {
            colour: true,
            width: None,
        };
        assert!(
            table
                .render(coloured)
                .contains("db     \x1b[31mDOWN\x1b[0m   connect")
        );
    }

    #[test]
    fn times_read_as_how_long_ago() {
        let now = humantime::parse_rfc3339("2026-12-01T10:00:00Z").unwrap();
        for (at, said) in [
            ("2026-12-01T09:59:30.000Z", "30s"),
            ("2026-12-01T09:55:00.000Z", "5m"),
            ("2026-12-01T07:00:00.000Z", "3h"),
            ("2026-11-29T10:00:00.000Z", "2d"),
        ] {
            assert_eq!(ago(&Value::from(at), now), said);
        }
        assert_eq!(ago(&Value::Null, now), "-");
    }
}
