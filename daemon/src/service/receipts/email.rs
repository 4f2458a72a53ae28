//! Email's receipts (CONTRACT §8): the reports mail servers send to a message's VERP return
//! path, read with `mail-parser`. An RFC 3464 delivery status notification (`multipart/report;
//! report-type=delivery-status`) gives one receipt per recipient it reports on: `Action: failed`
//! is `bounced` (retryable only for a transient `Status: 4.x.x`), `delayed`, `delivered`,
//! `relayed` and `expanded` are kept in the history without changing the status. An RFC 5965
//! feedback report (`report-type=feedback-report`) is a recipient's complaint: `complained`.
//! Anything else is dropped and counted as `malformed`.
//!
//! A report is written by whoever sends mail to the listener, so nothing in it is trusted to
//! say which message it is about (the return path it came to does), its text is cut short, and
//! every address in it is masked before it is kept.

use herald_common::{
    api::notifications::{DeliveryStatus, ReceiptProvider},
    ids::TransactionId,
    mask::mask,
};
use mail_parser::{MessageParser, MimeHeaders};

use super::{Counted, ReceiptError, Said, Target, count, record};
use crate::{providers::replace_ignoring_ascii_case, state::AppState};

/// Per-recipient groups recorded from one report at most: a message Herald sends has one
/// recipient, so more are noise, and must not cost a write each.
const MAX_RECIPIENTS: usize = 10;
/// Characters of a receipt's text kept at most.
const MAX_DETAIL: usize = 500;
/// Characters of a provider status (a DSN's `Action`, a `Feedback-Type`) kept at most.
const MAX_WORD: usize = 32;

/// Why a message to a return path is not a report Herald reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotAReport(pub &'static str);

/// The receipts a delivery status or feedback report gives, in its order.
pub fn parse_report(raw: &[u8]) -> Result<Vec<Said>, NotAReport> {
    let message = MessageParser::new().parse(raw).ok_or(NotAReport("not a MIME message"))?;
    let root = message.root_part();
    if !root.is_content_type("multipart", "report") {
        return Err(NotAReport("not a multipart/report"));
    }
    let report_type = root
        .content_type()
        .and_then(|ct| ct.attribute("report-type"))
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let machine_types: &[&str] = match report_type.as_str() {
        "delivery-status" => &["delivery-status", "global-delivery-status"],
        "feedback-report" => &["feedback-report"],
        _ => return Err(NotAReport("a report of another type")),
    };
    // The machine-readable part is a direct child of the report (RFC 6522 §3).
    let part = root
        .sub_parts()
        .unwrap_or_default()
        .iter()
        .filter_map(|&i| message.parts.get(i as usize))
        .find(|part| machine_types.iter().any(|subtype| part.is_content_type("message", subtype)))
        .ok_or(NotAReport("no delivery-status or feedback-report part"))?;
    let groups = field_groups(part.contents());
    let said = if report_type == "feedback-report" {
        feedback(&groups).into_iter().collect::<Vec<_>>()
    } else {
        delivery_status(&groups)
    };
    if said.is_empty() {
        return Err(NotAReport("no recipient or feedback type it can be read for"));
    }
    Ok(said)
}

/// Records what the report `raw`, sent to the return path of `about`, says (each receipt
/// counted by [`record`]). A message that is not a report is dropped and counted as
/// `malformed`; a report about an OTP email is counted as `unknown` (OTP transactions have no
/// receipts). Fails only if the store does, for the mail server to try again later.
pub async fn receive(
    state: &AppState,
    about: &TransactionId,
    raw: &[u8],
    received_at: i64,
) -> Result<Vec<Counted>, ReceiptError> {
    let said = match parse_report(raw) {
        Ok(said) => said,
        Err(NotAReport(why)) => {
            tracing::info!(transaction = %about.as_str(), reason = why, "email report dropped");
            count(ReceiptProvider::Email, Counted::Malformed);
            return Ok(vec![Counted::Malformed]);
        }
    };
    let TransactionId::Notification(id) = about else {
        count(ReceiptProvider::Email, Counted::Unknown);
        return Ok(vec![Counted::Unknown]);
    };
    let mut counted = Vec::with_capacity(said.len());
    for said in said {
        tracing::info!(notification = %id.as_str(), status = %said.status, provider_status = %said.provider_status, "email report");
        counted.push(record(state, Target::Notification(id.clone()), said, received_at).await?);
    }
    Ok(counted)
}

/// One group of `Name: value` fields (names lower-cased, folded values unfolded).
type Fields = Vec<(String, String)>;

/// The field groups of a `message/delivery-status` or `message/feedback-report` body: blocks
/// of header-style fields separated by blank lines (RFC 3464 §2.1), each block read by
/// mail-parser's header parser.
fn field_groups(body: &[u8]) -> Vec<Fields> {
    let text = String::from_utf8_lossy(body);
    let mut groups = Vec::new();
    let mut block = String::new();
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            groups.extend(read_fields(&block));
            block.clear();
        } else {
            block.push_str(line);
        }
    }
    groups.extend(read_fields(&block));
    groups
}

fn read_fields(block: &str) -> Option<Fields> {
    if block.trim().is_empty() {
        return None;
    }
    // A blank line ends the header block for the parser.
    let block = format!("{}\n\n", block.trim_end());
    let parsed = MessageParser::new().parse_headers(block.as_bytes())?;
    let fields: Fields = parsed
        .headers()
        .iter()
        .filter_map(|h| Some((h.name().to_ascii_lowercase(), unfold(h.value().as_text()?))))
        .collect();
    (!fields.is_empty()).then_some(fields)
}

fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// One receipt per recipient group of a delivery status notification (those with an
/// `Action`), at most [`MAX_RECIPIENTS`].
fn delivery_status(groups: &[Fields]) -> Vec<Said> {
    groups
        .iter()
        .filter_map(|fields| {
            let action = word(field(fields, "action")?);
            let status = field(fields, "status").unwrap_or_default();
            let code = status_code(status);
            let (meaning, retryable) = match action.as_str() {
                // A failure without a readable status class is taken as permanent.
                "failed" => (DeliveryStatus::Bounced, code.as_deref().is_some_and(|c| c.starts_with('4'))),
                "delayed" | "delivered" | "relayed" | "expanded" => (DeliveryStatus::Sent, false),
                _ => return None,
            };
            let text = match field(fields, "diagnostic-code") {
                Some(diagnostic) if !status.is_empty() => format!("{status}: {diagnostic}"),
                Some(diagnostic) => diagnostic.to_owned(),
                None => status.to_owned(),
            };
            Some(Said {
                provider: ReceiptProvider::Email,
                provider_status: action,
                status: meaning,
                error_code: code,
                detail: detail(&text, &recipients(fields)),
                retryable,
            })
        })
        .take(MAX_RECIPIENTS)
        .collect()
}

/// The receipt of a feedback report: a complaint, unless the report says the message was not
/// spam or is about authentication (those are kept in the history only).
fn feedback(groups: &[Fields]) -> Option<Said> {
    let fields = groups.first()?;
    let kind = word(field(fields, "feedback-type")?);
    let status = match kind.as_str() {
        "abuse" | "fraud" | "virus" | "other" => DeliveryStatus::Complained,
        _ => DeliveryStatus::Sent,
    };
    let mut recipients = recipients(fields);
    recipients.extend(field(fields, "original-rcpt-to").map(strip_angles));
    Some(Said {
        provider: ReceiptProvider::Email,
        detail: detail(&format!("Feedback-Type: {kind}"), &recipients),
        provider_status: kind,
        status,
        error_code: None,
        retryable: false,
    })
}

/// The addresses a group names its recipient by (`Final-Recipient: rfc822; ann@example.com`),
/// to be masked wherever they appear, whatever their form.
fn recipients(fields: &Fields) -> Vec<String> {
    ["final-recipient", "original-recipient", "x-actual-recipient"]
        .iter()
        .filter_map(|name| field(fields, name))
        .map(|value| strip_angles(value.split_once(';').map_or(value, |(_, address)| address)))
        .filter(|address| !address.is_empty())
        .collect()
}

fn strip_angles(address: &str) -> String {
    address.trim().trim_start_matches('<').trim_end_matches('>').trim().to_owned()
}

/// A status code (`5.1.1`) from a `Status` field, which may carry a comment after it.
fn status_code(status: &str) -> Option<String> {
    let code = status.split_whitespace().next()?;
    let mut parts = code.split('.');
    let class = parts.next()?;
    let valid = matches!(class, "2" | "4" | "5")
        && parts.clone().count() == 2
        && parts.all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()));
    valid.then(|| code.to_owned())
}

/// A one-word field value, lower-cased and cut short.
fn word(value: &str) -> String {
    value.split_whitespace().next().unwrap_or_default().to_ascii_lowercase().chars().take(MAX_WORD).collect()
}

/// Folded lines joined, runs of whitespace and control characters made one space.
fn unfold(value: &str) -> String {
    value
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` with `recipients` and every other address in it masked, cut to [`MAX_DETAIL`]
/// characters.
fn detail(text: &str, recipients: &[String]) -> Option<String> {
    let mut text = text.to_owned();
    for recipient in recipients {
        text = replace_ignoring_ascii_case(&text, recipient, &mask(recipient));
    }
    let text = mask_addresses(&text);
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(MAX_DETAIL).collect())
}

/// Every `local@domain` in `text` replaced by its mask. Masking is idempotent, so an address
/// already masked stays as it is.
fn mask_addresses(text: &str) -> String {
    let is_local = |c: char| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~.".contains(c);
    let is_domain = |c: char| c.is_alphanumeric() || c == '-' || c == '.';
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0; // byte offset of `text` copied to `out` so far
    let mut i = 0;
    while i < chars.len() {
        if chars[i].1 != '@' {
            i += 1;
            continue;
        }
        let mut start = i;
        while start > 0 && is_local(chars[start - 1].1) && chars[start - 1].0 >= copied {
            start -= 1;
        }
        // Quotes and dots around an address (`'ann@example.com'`) are not part of it.
        while start < i && "'`.".contains(chars[start].1) {
            start += 1;
        }
        let mut end = i + 1;
        while end < chars.len() && is_domain(chars[end].1) {
            end += 1;
        }
        // A sentence's full stop after the domain is not part of it.
        while end > i + 1 && chars[end - 1].1 == '.' {
            end -= 1;
        }
        if start == i || end == i + 1 {
            i += 1;
            continue;
        }
        let (from, to) = (chars[start].0, chars.get(end).map_or(text.len(), |c| c.0));
        out.push_str(&text[copied..from]);
        out.push_str(&mask(&text[from..to]));
        copied = to;
        i = end;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests;
