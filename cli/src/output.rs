//! What the CLI prints: readable tables and fields by default, the API's exact JSON with `--json`
//! (one object per line with `--jsonl`); colour only on a terminal and never with `NO_COLOR`;
//! times in local time on a terminal and RFC 3339 otherwise. A closed pipe
//! (`herald activity list | head -1`) ends the command quietly.

use std::io::{IsTerminal, Write};

use herald_common::Timestamp;
use serde::Serialize;
use time::{OffsetDateTime, UtcOffset, macros::format_description};

use crate::{
    exit::Fail,
    style::{Tone, paint},
};

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    /// The API's JSON, pretty-printed.
    Json,
    /// One compact JSON object per line.
    Jsonl,
}

/// A table cell: its text and how to show it.
#[derive(Clone, Debug)]
pub struct Cell {
    pub text: String,
    pub tone: Tone,
}

impl<T: Into<String>> From<T> for Cell {
    fn from(text: T) -> Self {
        Cell { text: text.into(), tone: Tone::Plain }
    }
}

pub fn cell(text: impl Into<String>, tone: Tone) -> Cell {
    Cell { text: text.into(), tone }
}

/// Rows under headers, columns aligned.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Self { headers: headers.to_vec(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    /// The column widths that fit every cell (in characters).
    pub fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.text.chars().count());
                }
            }
        }
        widths
    }

    /// The table's lines (the header first), with `color` escape codes or none.
    pub fn lines(&self, color: bool, widths: &[usize]) -> Vec<String> {
        let header: Vec<Cell> = self.headers.iter().map(|h| cell(*h, Tone::Bold)).collect();
        std::iter::once(&header).chain(&self.rows).map(|row| line(row, widths, color)).collect()
    }
}

/// One row, padded to `widths`; the last column is not padded.
pub fn line(row: &[Cell], widths: &[usize], color: bool) -> String {
    let mut out = String::new();
    for (i, cell) in row.iter().enumerate() {
        if i > 0 {
            out.push_str("  ");
        }
        let last = i + 1 == row.len();
        let pad = if last {
            0
        } else {
            widths.get(i).copied().unwrap_or(0).saturating_sub(cell.text.chars().count())
        };
        out.push_str(&paint(&cell.text, cell.tone, color));
        out.extend(std::iter::repeat_n(' ', pad));
    }
    out
}

/// The printer of one command run.
#[derive(Clone, Debug)]
pub struct Output {
    pub format: Format,
    /// Colour on stdout.
    pub color: bool,
    /// Colour on stderr.
    pub color_err: bool,
    pub stdout_tty: bool,
    pub stderr_tty: bool,
    /// The terminal's local offset, read at start-up (reading it later, with threads running,
    /// is refused on Linux).
    pub local_offset: Option<UtcOffset>,
}

impl Output {
    pub fn detect(format: Format) -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
            || std::env::var("TERM").is_ok_and(|t| t == "dumb");
        let (stdout_tty, stderr_tty) = (std::io::stdout().is_terminal(), std::io::stderr().is_terminal());
        Self {
            format,
            color: stdout_tty && !no_color,
            color_err: stderr_tty && !no_color,
            stdout_tty,
            stderr_tty,
            local_offset: UtcOffset::current_local_offset().ok(),
        }
    }

    pub fn is_json(&self) -> bool {
        self.format != Format::Table
    }

    /// Writes `text` and a newline to stdout.
    pub fn line(&self, text: &str) -> Result<(), Fail> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{text}").and_then(|_| out.flush()).map_err(Fail::from_io)
    }

    /// Writes `text` as it is (it carries its own newline or cursor movement).
    pub fn line_raw(&self, text: &str) -> Result<(), Fail> {
        let mut out = std::io::stdout().lock();
        write!(out, "{text}").and_then(|_| out.flush()).map_err(Fail::from_io)
    }

    /// Writes `value` as JSON (pretty with `--json`, one line with `--jsonl`).
    pub fn json<T: Serialize + ?Sized>(&self, value: &T) -> Result<(), Fail> {
        let text = match self.format {
            Format::Json => serde_json::to_string_pretty(value),
            _ => serde_json::to_string(value),
        }
        .map_err(|e| Fail::failure(format!("cannot write JSON: {e}")))?;
        self.line(&text)
    }

    pub fn table(&self, table: &Table) -> Result<(), Fail> {
        let widths = table.widths();
        let mut out = std::io::stdout().lock();
        for line in table.lines(self.color, &widths) {
            writeln!(out, "{line}").map_err(Fail::from_io)?;
        }
        out.flush().map_err(Fail::from_io)
    }

    /// `name  value` lines, names aligned.
    pub fn fields(&self, fields: &[(&str, Cell)]) -> Result<(), Fail> {
        let width = fields.iter().map(|(name, _)| name.chars().count()).max().unwrap_or(0);
        let mut out = std::io::stdout().lock();
        for (name, value) in fields {
            let name = paint(&format!("{name:width$}"), Tone::Dim, self.color);
            writeln!(out, "{name}  {}", paint(&value.text, value.tone, self.color)).map_err(Fail::from_io)?;
        }
        out.flush().map_err(Fail::from_io)
    }

    /// A note for the person (stderr): progress, hints, summaries of JSON runs.
    pub fn note(&self, text: &str) {
        eprintln!("{text}");
    }

    /// A time: local on a terminal (`2026-11-23 21:55:03`), the API's RFC 3339 otherwise.
    pub fn time(&self, at: Timestamp) -> String {
        match self.local_offset.filter(|_| self.stdout_tty) {
            Some(offset) => local_time(at, offset).unwrap_or_else(|| at.to_string()),
            None => at.to_string(),
        }
    }
}

fn local_time(at: Timestamp, offset: UtcOffset) -> Option<String> {
    let when = OffsetDateTime::from_unix_timestamp_nanos(i128::from(at.millis()) * 1_000_000)
        .ok()?
        .to_offset(offset);
    when.format(format_description!("[year]-[month]-[day] [hour]:[minute]:[second]")).ok()
}

/// `text` cut to `max` characters with an ellipsis, on one line.
pub fn short(text: &str, max: usize) -> String {
    let one_line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_color_only_when_asked() {
        let mut table = Table::new(&["ID", "STATUS"]);
        table.row(vec!["notif_1".into(), cell("failed", Tone::Bad)]);
        table.row(vec!["n2".into(), cell("sent", Tone::Good)]);
        let widths = table.widths();
        assert_eq!(table.lines(false, &widths), ["ID       STATUS", "notif_1  failed", "n2       sent"]);
        let colored = table.lines(true, &widths);
        assert_eq!(colored[1], "notif_1  \u{1b}[31mfailed\u{1b}[0m");
    }

    #[test]
    fn short_text_stays_on_one_line() {
        assert_eq!(short("a\nb", 10), "a b");
        assert_eq!(short("abcdefghij", 5), "abcd…");
    }

    #[test]
    fn times_are_local_on_a_terminal_only() {
        let at = Timestamp::from_millis(1_700_000_000_000);
        let mut out = Output::detect(Format::Table);
        out.local_offset = Some(UtcOffset::from_hms(1, 0, 0).unwrap());
        out.stdout_tty = true;
        assert_eq!(out.time(at), "2023-11-14 23:13:20");
        out.stdout_tty = false;
        assert_eq!(out.time(at), "2023-11-14T22:13:20.000Z");
    }
}
