//! Output: a two-column table or exact JSON; errors as the problem's code and detail. Writing to
//! a closed pipe (`herald … | head`) ends quietly.

use std::io::Write;

use herald_common::client::ClientError;
use serde::Serialize;

/// Prints `value` as JSON (with `--json`) or as `field  value` lines.
pub fn print<T: Serialize>(json: bool, value: &T) -> anyhow::Result<()> {
    let value = serde_json::to_value(value)?;
    let mut out = std::io::stdout().lock();
    let written = if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)
    } else {
        print_fields(&mut out, &value)
    };
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn print_fields(out: &mut impl Write, value: &serde_json::Value) -> std::io::Result<()> {
    let Some(map) = value.as_object() else {
        return writeln!(out, "{value}");
    };
    let width = map.keys().map(String::len).max().unwrap_or(0);
    for (field, value) in map {
        let text = match value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        };
        writeln!(out, "{field:width$}  {text}")?;
    }
    Ok(())
}

pub fn print_error(error: &anyhow::Error) {
    match error.downcast_ref::<ClientError>().and_then(ClientError::problem) {
        Some(problem) => {
            eprintln!("error: {} ({})", problem.code.as_str(), problem.status);
            if let Some(detail) = &problem.detail {
                eprintln!("  {detail}");
            }
            for field in &problem.errors {
                eprintln!("  {}: {}", field.field, field.message);
            }
        }
        None => eprintln!("error: {error:#}"),
    }
}
