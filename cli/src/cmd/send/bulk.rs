//! `herald send --file recipients.csv`: one notification per row, `concurrency` in flight, with a
//! progress bar (rate, ETA) and a summary. Resumable: each row's `Idempotency-Key` derives from
//! the file's content, the row's number and its request, so running the same command again after
//! Ctrl-C or a crash sends nothing twice (the rows already accepted are answered as replays).
//! Rate limits and transient failures are waited out and retried with the same key.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures_util::{StreamExt, stream};
use herald_common::{
    ErrorCode,
    api::notifications::NotificationIn,
    client::{Client, ClientError},
    ids::NotificationId,
};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::{
    cmd::progress,
    context::Context,
    exit::{Exit, Fail, Interrupt},
    output::Format,
};

pub struct Options {
    pub file: PathBuf,
    pub concurrency: usize,
    pub failures: Option<PathBuf>,
    pub key_prefix: Option<String>,
    /// Rows started per second at most.
    pub rate: Option<u32>,
}

/// A row of the file.
#[derive(Debug)]
struct Row {
    /// 1 for the first row after the header.
    number: usize,
    recipient: String,
    vars: Map<String, Value>,
}

/// What became of a row.
enum Outcome {
    Sent(NotificationId),
    /// Accepted by an earlier run: nothing sent this time.
    AlreadySent(NotificationId),
    Refused {
        code: String,
        detail: String,
    },
    /// Not tried (interrupted).
    Skipped,
}

/// The rows of a CSV file with a `recipient` column; the other columns are template variables.
fn read_rows(bytes: &[u8], has_template: bool) -> Result<Vec<Row>, Fail> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(bytes);
    let headers =
        reader.headers().map_err(|e| Fail::usage(format!("cannot read the CSV header: {e}")))?.clone();
    let recipient_at = headers
        .iter()
        .position(|h| h.eq_ignore_ascii_case("recipient"))
        .ok_or_else(|| Fail::usage("the CSV file needs a `recipient` column"))?;
    let variables: Vec<(usize, String)> = headers
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != recipient_at)
        .map(|(i, h)| (i, h.to_owned()))
        .collect();
    if !variables.is_empty() && !has_template {
        let names: Vec<&str> = variables.iter().map(|(_, n)| n.as_str()).collect();
        return Err(Fail::usage(format!(
            "columns other than `recipient` ({}) are template variables: give --template",
            names.join(", ")
        )));
    }
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| Fail::usage(format!("row {}: {e}", i + 1)))?;
        let vars = variables
            .iter()
            .map(|(at, name)| (name.clone(), Value::String(record.get(*at).unwrap_or_default().to_owned())))
            .collect();
        rows.push(Row {
            number: i + 1,
            recipient: record.get(recipient_at).unwrap_or_default().to_owned(),
            vars,
        });
    }
    Ok(rows)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The row's request and its idempotency key: derived from the file's content, the row's number
/// and the request itself, so the same command sends the same keys, and a changed request (other
/// flags) never collides with an earlier one's key.
fn row_request(
    base: &NotificationIn,
    row: &Row,
    file_hash: &str,
    prefix: Option<&str>,
) -> (NotificationIn, String) {
    let mut request = base.clone();
    request.recipient = row.recipient.clone();
    if !row.vars.is_empty() {
        let mut vars = base.template_data.clone().unwrap_or_default();
        vars.extend(row.vars.clone());
        request.template_data = Some(vars);
    }
    let key = match prefix {
        Some(prefix) => format!("{prefix}-{}", row.number),
        None => {
            let json = serde_json::to_vec(&request).unwrap_or_default();
            let digest = Sha256::new()
                .chain_update(file_hash.as_bytes())
                .chain_update(row.number.to_be_bytes())
                .chain_update(&json)
                .finalize();
            format!("herald-bulk-{}", &hex(&digest)[..40])
        }
    };
    (request, key)
}

/// Sends one row, waiting out rate limits and retrying transient failures with the same key.
async fn send_row(client: &Client, request: &NotificationIn, key: &str) -> Outcome {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let wait = match client.dispatch(request, Some(key)).await {
            Ok(answer) if answer.replayed => return Outcome::AlreadySent(answer.value.notification_id),
            Ok(answer) => return Outcome::Sent(answer.value.notification_id),
            Err(error) => {
                let retry_in =
                    error.retry_after().unwrap_or(Duration::from_millis(500 * u64::from(attempt.min(10))));
                let retryable = match &error {
                    ClientError::Problem { problem, .. } => matches!(
                        problem.code,
                        ErrorCode::RateLimited | ErrorCode::IdempotencyInProgress | ErrorCode::Unavailable
                    ),
                    ClientError::Transport(_) => true,
                    ClientError::Unexpected { status, .. } => *status >= 500,
                };
                if !retryable || attempt >= 10 {
                    let fail = Fail::from(error);
                    let code = fail
                        .problem
                        .as_ref()
                        .map(|p| p.code.as_str().to_owned())
                        .unwrap_or_else(|| "error".into());
                    let fields: Vec<String> = fail
                        .problem
                        .iter()
                        .flat_map(|p| &p.errors)
                        .map(|f| format!("{}: {}", f.field, f.message))
                        .collect();
                    let detail = if fields.is_empty() { fail.message.clone() } else { fields.join("; ") };
                    return Outcome::Refused { code, detail };
                }
                retry_in
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[derive(Default)]
struct Tally {
    sent: usize,
    already: usize,
    refused: Vec<(usize, String, String, String)>,
    skipped: usize,
}

pub async fn run(ctx: &Context, client: &Client, base: NotificationIn, options: Options) -> Result<(), Fail> {
    let out = &ctx.out;
    let bytes = std::fs::read(&options.file)
        .map_err(|e| Fail::usage(format!("cannot read {}: {e}", options.file.display())))?;
    let rows = read_rows(&bytes, base.template_id.is_some())?;
    let file_hash = hex(&Sha256::digest(&bytes));
    let total = rows.len();
    let bar = progress(total as u64, "sending");
    let stop = Arc::new(AtomicBool::new(false));
    let pace = options.rate.map(|rate| {
        let mut every = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Arc::new(tokio::sync::Mutex::new(every))
    });
    let started = Instant::now();
    let mut results = stream::iter(rows)
        .map(|row| {
            let (client, stop, pace) = (client.clone(), stop.clone(), pace.clone());
            let (request, key) = row_request(&base, &row, &file_hash, options.key_prefix.as_deref());
            async move {
                if stop.load(Ordering::Acquire) {
                    return (row, Outcome::Skipped);
                }
                if let Some(pace) = pace {
                    pace.lock().await.tick().await;
                    if stop.load(Ordering::Acquire) {
                        return (row, Outcome::Skipped);
                    }
                }
                let outcome = send_row(&client, &request, &key).await;
                (row, outcome)
            }
        })
        .buffer_unordered(options.concurrency);
    let mut tally = Tally::default();
    let mut interrupted = false;
    let mut interrupt = Interrupt::listen()?;
    loop {
        let next = tokio::select! {
            next = results.next() => next,
            _ = interrupt.recv(), if !interrupted => {
                // Finish what is in flight, start nothing new.
                interrupted = true;
                stop.store(true, Ordering::Release);
                bar.set_message("stopping");
                continue;
            }
        };
        let Some((row, outcome)) = next else { break };
        if out.format == Format::Jsonl {
            out.json(&row_json(&row, &outcome))?;
        }
        match outcome {
            Outcome::Sent(_) => tally.sent += 1,
            Outcome::AlreadySent(_) => tally.already += 1,
            Outcome::Refused { code, detail } => {
                tally.refused.push((row.number, row.recipient, code, detail))
            }
            Outcome::Skipped => tally.skipped += 1,
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    let failures_file = if tally.refused.is_empty() {
        None
    } else {
        let path = options.failures.clone().unwrap_or_else(|| failures_path(&options.file));
        write_failures(&path, &mut tally.refused)?;
        Some(path)
    };
    summary(ctx, &tally, total, elapsed, failures_file.as_deref())?;
    if interrupted {
        return Err(Fail::new(
            Exit::Interrupted,
            format!(
                "interrupted after {} of {total} rows. Run the same command again to resume: the rows already \
                 accepted are not sent twice.",
                total - tally.skipped
            ),
        ));
    }
    if let Some(path) = failures_file {
        return Err(Fail::failure(format!(
            "{} of {total} rows were refused; they are listed in {}",
            tally.refused.len(),
            path.display()
        )));
    }
    Ok(())
}

fn row_json(row: &Row, outcome: &Outcome) -> Value {
    let (status, id, code, detail) = match outcome {
        Outcome::Sent(id) => ("sent", Some(id.to_string()), None, None),
        Outcome::AlreadySent(id) => ("already_sent", Some(id.to_string()), None, None),
        Outcome::Refused { code, detail } => ("refused", None, Some(code.clone()), Some(detail.clone())),
        Outcome::Skipped => ("skipped", None, None, None),
    };
    serde_json::json!({"row": row.number, "status": status, "notification_id": id, "code": code, "detail": detail})
}

/// `list.csv` → `list.failures.csv`, beside it.
fn failures_path(file: &Path) -> PathBuf {
    let stem =
        file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "send".to_owned());
    file.with_file_name(format!("{stem}.failures.csv"))
}

fn write_failures(path: &Path, refused: &mut [(usize, String, String, String)]) -> Result<(), Fail> {
    refused.sort_by_key(|(row, ..)| *row);
    let mut writer = csv::Writer::from_path(path)
        .map_err(|e| Fail::failure(format!("cannot write {}: {e}", path.display())))?;
    let write = |w: &mut csv::Writer<std::fs::File>| -> csv::Result<()> {
        w.write_record(["row", "recipient", "code", "detail"])?;
        for (row, recipient, code, detail) in refused.iter() {
            w.write_record([row.to_string().as_str(), recipient, code, detail])?;
        }
        w.flush()?;
        Ok(())
    };
    write(&mut writer).map_err(|e| Fail::failure(format!("cannot write {}: {e}", path.display())))
}

fn summary(
    ctx: &Context,
    tally: &Tally,
    total: usize,
    elapsed: Duration,
    failures: Option<&Path>,
) -> Result<(), Fail> {
    let out = &ctx.out;
    let rate = (tally.sent + tally.already) as f64 / elapsed.as_secs_f64().max(0.001);
    let mut reasons: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, _, code, _) in &tally.refused {
        *reasons.entry(code.as_str()).or_default() += 1;
    }
    let value = serde_json::json!({
        "rows": total,
        "sent": tally.sent,
        "already_sent": tally.already,
        "refused": tally.refused.len(),
        "refused_by_code": reasons,
        "skipped": tally.skipped,
        "seconds": elapsed.as_secs_f64(),
        "failures_file": failures.map(|p| p.display().to_string()),
    });
    match out.format {
        Format::Json => out.json(&value),
        // The rows went to stdout; the summary goes beside the progress.
        Format::Jsonl => {
            out.note(&value.to_string());
            Ok(())
        }
        Format::Table => {
            let mut fields = vec![
                ("rows", total.to_string().into()),
                ("sent", crate::output::cell(tally.sent.to_string(), crate::style::Tone::Good)),
                ("already sent", tally.already.to_string().into()),
                (
                    "refused",
                    crate::output::cell(
                        tally.refused.len().to_string(),
                        if tally.refused.is_empty() {
                            crate::style::Tone::Plain
                        } else {
                            crate::style::Tone::Bad
                        },
                    ),
                ),
            ];
            for (code, n) in &reasons {
                fields.push(("  by code", format!("{code}: {n}").into()));
            }
            if tally.skipped > 0 {
                fields.push(("not tried", tally.skipped.to_string().into()));
            }
            fields.push(("time", format!("{:.1} s ({rate:.0}/s)", elapsed.as_secs_f64()).into()));
            if let Some(path) = failures {
                fields.push(("failures", path.display().to_string().into()));
            }
            out.fields(&fields)
        }
    }
}

#[cfg(test)]
mod tests {
    use herald_common::api::notifications::Channel;

    use super::*;

    #[test]
    fn rows_carry_their_variables_and_stable_keys() {
        let csv = b"recipient,name\nann@example.com,Ann\n bob@example.com , Bob \n";
        let rows = read_rows(csv, true).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[1].number, rows[1].recipient.as_str()), (2, "bob@example.com"));
        assert_eq!(rows[1].vars["name"], "Bob");
        let base = NotificationIn::new(Channel::Email, "", "Hi");
        let (request, key) = row_request(&base, &rows[0], "h1", None);
        assert_eq!(request.recipient, "ann@example.com");
        assert_eq!(request.template_data.as_ref().unwrap()["name"], "Ann");
        assert_eq!(row_request(&base, &rows[0], "h1", None).1, key, "the same file and row, the same key");
        assert_ne!(row_request(&base, &rows[0], "h2", None).1, key, "another file, another key");
        assert_ne!(row_request(&base, &rows[1], "h1", None).1, key, "another row, another key");
        let mut other = base.clone();
        other.subject = Some("changed".into());
        assert_ne!(row_request(&other, &rows[0], "h1", None).1, key, "another request, another key");
        assert_eq!(row_request(&base, &rows[1], "h1", Some("june")).1, "june-2");
    }

    #[test]
    fn files_need_a_recipient_and_a_template_for_variables() {
        assert!(read_rows(b"email\na@example.com\n", false).unwrap_err().message.contains("recipient"));
        assert!(
            read_rows(b"recipient,name\na@example.com,A\n", false)
                .unwrap_err()
                .message
                .contains("--template")
        );
        assert_eq!(read_rows(b"Recipient\na@example.com\n", false).unwrap().len(), 1);
        assert_eq!(failures_path(Path::new("/tmp/list.csv")), Path::new("/tmp/list.failures.csv"));
    }
}
