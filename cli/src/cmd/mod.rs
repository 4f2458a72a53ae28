//! One module per resource, each an `Args` (or `Command`) with `exec`, and the helpers they share.

pub mod activity;
pub mod domains;
pub mod health;
pub mod inbox;
pub mod man;
pub mod notifications;
pub mod otp;
pub mod send;
pub mod stream;
pub mod suppressions;
pub mod templates;
pub mod token;
pub mod tui;
pub mod webhooks;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use herald_common::{Timestamp, client::ClientError};
use serde_json::{Map, Value};

use crate::{
    exit::Fail,
    output::{Cell, Format, Output, Table},
};

/// A `KEY=VALUE` argument.
pub fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

/// `KEY=VALUE` pairs as a JSON object (values are strings; `KEY:=JSON` takes JSON, as in HTTPie).
pub fn object(pairs: &[(String, String)]) -> Result<Map<String, Value>, Fail> {
    let mut map = Map::new();
    for (key, value) in pairs {
        match key.strip_suffix(':') {
            Some(key) => {
                let parsed = serde_json::from_str(value)
                    .map_err(|e| Fail::usage(format!("`{key}:={value}` is not JSON: {e}")))?;
                map.insert(key.to_owned(), parsed);
            }
            None => {
                map.insert(key.clone(), Value::String(value.clone()));
            }
        }
    }
    Ok(map)
}

/// The body arguments that `send` and `templates create|update` share.
#[derive(clap::Args)]
pub struct Bodies {
    /// Plain-text body.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Plain-text body from a file.
    #[arg(long, value_name = "FILE")]
    body_file: Option<PathBuf>,
    /// HTML body from a file (email; in a template, values are escaped in it).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

impl Bodies {
    /// The plain-text body and the HTML body, read from their files where given.
    pub fn read(&self) -> Result<(Option<String>, Option<String>), Fail> {
        let body = match (&self.body, &self.body_file) {
            (Some(body), _) => Some(body.clone()),
            (None, Some(path)) => Some(read_file(path, "body file")?),
            (None, None) => None,
        };
        let html_body = self.html.as_deref().map(|p| read_file(p, "HTML file")).transpose()?;
        Ok((body, html_body))
    }
}

/// The text of a file argument.
pub fn read_file(path: &Path, what: &str) -> Result<String, Fail> {
    std::fs::read_to_string(path)
        .map_err(|e| Fail::usage(format!("cannot read the {what} {}: {e}", path.display())))
}

/// A time argument: RFC 3339 (`2026-11-23T10:00:00Z`), or an age (`90s`, `15m`, `2h`, `7d`) for that
/// long ago.
pub fn when(text: &str) -> Result<Timestamp, String> {
    if let Ok(at) = Timestamp::parse(text) {
        return Ok(at);
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 =
        number.parse().map_err(|_| format!("`{text}` is neither an RFC 3339 time nor an age such as 2h"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("`{text}`: an age's unit is s, m, h or d")),
    };
    Ok(Timestamp::now().plus_millis(-(seconds.saturating_mul(1000) as i64)))
}

/// A duration argument: `500ms`, `30s`, `5m`, `1h`.
pub fn duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("`{text}` is not a duration such as 30s or 5m"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" | "" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("`{text}`: a duration's unit is ms, s, m or h")),
    })
}

/// `--page`, `--limit` and `--all` of a list command.
#[derive(clap::Args, Clone, Copy)]
pub struct PageArgs {
    /// Page number, from 1.
    #[arg(long, default_value_t = 1)]
    pub page: u32,
    /// Items per page (1 to 100).
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Walk every page.
    #[arg(long)]
    pub all: bool,
}

/// A page of a list endpoint (`{total_count, page, limit, items}`), as `--page`, `--limit` and
/// `--all` walk it.
pub trait Paged: serde::Serialize {
    type Item: serde::Serialize;
    fn items(&self) -> &[Self::Item];
    /// The page number, its size and how many items there are in all.
    fn position(&self) -> (u32, u32, u64);
}

macro_rules! paged {
    ($($list:ty => $item:ty),* $(,)?) => {$(
        impl Paged for $list {
            type Item = $item;
            fn items(&self) -> &[$item] {
                &self.items
            }
            fn position(&self) -> (u32, u32, u64) {
                (self.page, self.limit, self.total_count)
            }
        }
    )*};
}
paged! {
    herald_common::api::activity::ActivityList => herald_common::api::activity::ActivityItem,
    herald_common::api::suppressions::SuppressionList => herald_common::api::suppressions::Suppression,
    herald_common::api::webhooks::WebhookDeliveryList => herald_common::api::webhooks::WebhookDelivery,
}

/// Prints page `first` of a list, or with `all` every page from it: a table of `row`s (with a
/// note on how to see more), the page as JSON, or the items as JSON lines. `what` names the items.
pub async fn pages<P, F, Fut>(
    out: &Output,
    headers: &[&'static str],
    what: &str,
    (first, all): (u32, bool),
    mut fetch: F,
    row: impl Fn(&Output, &P::Item) -> Vec<Cell>,
) -> Result<(), Fail>
where
    P: Paged,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<P, ClientError>>,
{
    let mut table = Table::new(headers);
    let mut number = first;
    loop {
        let page = fetch(number).await?;
        match out.format {
            Format::Json if !all => return out.json(&page),
            Format::Json | Format::Jsonl => page.items().iter().try_for_each(|item| out.json(item))?,
            Format::Table => page.items().iter().for_each(|item| table.row(row(out, item))),
        }
        let (at, limit, total) = page.position();
        let seen = u64::from(at) * u64::from(limit);
        if !all || page.items().is_empty() || seen >= total {
            if out.format == Format::Table {
                out.table(&table)?;
                if !all && seen < total {
                    out.note(&format!(
                        "page {at} of {} ({total} {what}); --page {} for the next, --all for every page",
                        total.div_ceil(u64::from(limit.max(1))),
                        at + 1
                    ));
                }
            }
            return Ok(());
        }
        number = at + 1;
    }
}

/// Asks a yes/no question on the terminal; `false` unless the answer starts with y.
pub fn confirm(question: &str) -> Result<bool, Fail> {
    use std::io::Write;
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| Fail::failure(format!("cannot read the answer: {e}")))?;
    Ok(answer.trim().to_ascii_lowercase().starts_with('y'))
}

/// A progress bar on stderr (drawn only when stderr is a terminal).
pub fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} {msg} [{bar:30}] {pos}/{len} · {per_sec} · ETA {eta}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_owned());
    bar
}

/// A spinner on stderr (drawn only when stderr is a terminal) with `message`, ticking until it
/// is finished. (A bar without a length drew an empty bar and "0/0" beside no message.)
pub fn spinner(message: String) -> indicatif::ProgressBar {
    let spinner = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    spinner.set_style(indicatif::ProgressStyle::default_spinner());
    spinner.set_message(message);
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    spinner
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse() {
        assert_eq!(key_value("name=Ann"), Ok(("name".into(), "Ann".into())));
        assert_eq!(key_value("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(key_value("nope").is_err());
        let map = object(&[("n".into(), "1".into()), ("m:".into(), "[1,2]".into())]).unwrap();
        assert_eq!(Value::Object(map), serde_json::json!({"n": "1", "m": [1, 2]}));
        assert_eq!(duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(duration("5y").is_err());
        let two_hours_ago = when("2h").unwrap();
        assert!((Timestamp::now().millis() - two_hours_ago.millis() - 7_200_000).abs() < 5_000);
        assert_eq!(when("2026-11-23T10:00:00Z").unwrap().to_string(), "2026-11-23T10:00:00.000Z");
        assert!(when("yesterday").is_err());
    }
}
