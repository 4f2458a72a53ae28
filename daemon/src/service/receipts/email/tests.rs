//! The reports of the RFCs' own examples (`daemon/fixtures/reports/`, see its README), and one a
//! real Postfix wrote, read as the bounce listener reads them.

use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/reports/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The report's receipts, read from its LF text and from the same with CRLF (as it arrives
/// over SMTP), which must agree.
fn read(name: &str) -> Vec<Said> {
    let lf = fixture(name);
    let crlf = String::from_utf8(lf.clone()).unwrap().replace('\n', "\r\n");
    let said = parse_report(&lf).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let said_crlf = parse_report(crlf.as_bytes()).unwrap_or_else(|e| panic!("{name} (CRLF): {e:?}"));
    assert_eq!(format!("{said:?}"), format!("{said_crlf:?}"), "{name}");
    said
}

/// A receipt as (provider_status, status, error_code, retryable, detail).
type Summary<'a> = (&'a str, DeliveryStatus, Option<&'a str>, bool, Option<&'a str>);

fn summary(said: &[Said]) -> Vec<Summary<'_>> {
    said.iter()
        .map(|s| {
            assert_eq!(s.provider, ReceiptProvider::Email);
            (s.provider_status.as_str(), s.status, s.error_code.as_deref(), s.retryable, s.detail.as_deref())
        })
        .collect()
}

#[test]
fn rfc3464_simple_dsn_is_a_transient_bounce() {
    // Action: failed with Status: 4.0.0: bounced, and retryable since the failure is transient.
    assert_eq!(
        summary(&read("rfc3464-simple.eml")),
        [(
            "failed",
            DeliveryStatus::Bounced,
            Some("4.0.0"),
            true,
            Some("4.0.0: smtp; 426 connection timed out")
        )]
    );
}

#[test]
fn rfc3464_multi_recipient_dsn_gives_a_receipt_per_recipient() {
    assert_eq!(
        summary(&read("rfc3464-multi-recipient.eml")),
        [
            (
                "failed",
                DeliveryStatus::Bounced,
                Some("5.0.0"),
                false,
                // The folded diagnostic is unfolded, and the address it quotes (in another
                // case than Final-Recipient's) masked as the recipient.
                Some(
                    "5.0.0 (permanent failure): smtp; 550 'a*****b@vnet.ibm.com' is not a registered gateway user"
                )
            ),
            // Delayed: kept in the history only (`sent` moves nothing).
            (
                "delayed",
                DeliveryStatus::Sent,
                Some("4.0.0"),
                false,
                Some("4.0.0 (hpnjld.njd.jp.com: host name lookup failure)")
            ),
            ("failed", DeliveryStatus::Bounced, Some("5.0.0"), false, Some("5.0.0: smtp; 550 user unknown")),
        ]
    );
}

#[test]
fn rfc3464_delayed_dsn_changes_nothing() {
    assert_eq!(
        summary(&read("rfc3464-delayed.eml")),
        [("delayed", DeliveryStatus::Sent, Some("4.0.0"), false, Some("4.0.0 (unknown temporary failure)"))]
    );
}

#[test]
fn rfc3464_gateway_dsn_is_a_hard_bounce() {
    // A foreign recipient (`unknown; nair_s`) and no diagnostic: the Status is the text.
    assert_eq!(
        summary(&read("rfc3464-gateway.eml")),
        [(
            "failed",
            DeliveryStatus::Bounced,
            Some("5.0.0"),
            false,
            Some("5.0.0 (unknown permanent failure)")
        )]
    );
}

#[test]
fn rfc5965_feedback_reports_are_complaints() {
    for name in ["rfc5965-simple.eml", "rfc5965-full.eml"] {
        assert_eq!(
            summary(&read(name)),
            [("abuse", DeliveryStatus::Complained, None, false, Some("Feedback-Type: abuse"))],
            "{name}"
        );
    }
}

#[test]
fn postfix_hard_bounce() {
    let said = read("postfix-3.7-hard-bounce.eml");
    assert_eq!(
        summary(&said),
        [(
            "failed",
            DeliveryStatus::Bounced,
            Some("5.1.1"),
            false,
            Some("5.1.1: smtp; 550 5.1.1 <n****y@example.net>: Recipient address rejected: User unknown")
        )]
    );
}

#[test]
fn reports_never_keep_a_raw_address() {
    for name in [
        "rfc3464-simple.eml",
        "rfc3464-multi-recipient.eml",
        "rfc3464-gateway.eml",
        "rfc3464-delayed.eml",
        "rfc5965-full.eml",
        "postfix-3.7-hard-bounce.eml",
    ] {
        for said in read(name) {
            let kept =
                format!("{} {:?} {:?}", said.provider_status, said.error_code, said.detail).to_lowercase();
            for raw in ["louisl@", "arathib@", "johnh@", "wsnell@", "nair_s", "thomas@", "user@", "nobody@"] {
                assert!(!kept.contains(raw), "{name}: `{raw}` kept in {kept}");
            }
        }
    }
}

#[test]
fn other_mail_is_not_a_report() {
    let not = |raw: &str| parse_report(raw.as_bytes()).unwrap_err().0;
    assert_eq!(not(""), "not a MIME message");
    assert_eq!(not("Subject: hello\n\nJust a reply: thanks!\n"), "not a multipart/report");
    assert_eq!(not("\u{0}\u{1}garbage"), "not a multipart/report");
    // An RFC 8098 read receipt (another report type) is not read either.
    let mdn = "Content-Type: multipart/report; report-type=disposition-notification; boundary=b\n\n\
               --b\nContent-Type: message/disposition-notification\n\nDisposition: manual-action/MDN-sent-manually; displayed\n\n--b--\n";
    assert_eq!(not(mdn), "a report of another type");
    // A DSN without its machine-readable part, or whose groups say nothing it can read.
    let text_only = "Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n\
                     --b\nContent-Type: text/plain\n\nYour mail bounced.\n--b--\n";
    assert_eq!(not(text_only), "no delivery-status or feedback-report part");
    let no_action = "Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n\
                     --b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; x\n\nStatus: 5.0.0\n--b--\n";
    assert_eq!(not(no_action), "no recipient or feedback type it can be read for");
    let no_type = "Content-Type: multipart/report; report-type=feedback-report; boundary=b\n\n\
                   --b\nContent-Type: message/feedback-report\n\nUser-Agent: x\n--b--\n";
    assert_eq!(not(no_type), "no recipient or feedback type it can be read for");
}

#[test]
fn odd_reports_are_read_carefully() {
    let dsn = |fields: &str| {
        let raw = format!(
            "Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n--b\n\
             Content-Type: message/delivery-status\n\nReporting-MTA: dns; x\n\n{fields}\n--b--\n"
        );
        summary(&parse_report(raw.as_bytes()).unwrap())
            .into_iter()
            .map(|(a, s, c, r, d)| (a.to_owned(), s, c.map(str::to_owned), r, d.map(str::to_owned)))
            .collect::<Vec<_>>()
    };
    // A failure without a readable Status is taken as permanent; its code is not kept.
    assert_eq!(
        dsn("Action: FAILED\nStatus: soon"),
        [("failed".to_owned(), DeliveryStatus::Bounced, None, false, Some("soon".to_owned()))]
    );
    // Delivered and relayed are history only; an unknown action is skipped.
    let said = dsn(
        "Action: delivered\nStatus: 2.0.0\n\nAction: relayed\nStatus: 2.0.0\n\nAction: teleported\nStatus: 2.0.0",
    );
    assert_eq!(
        said.iter().map(|s| (s.0.as_str(), s.1)).collect::<Vec<_>>(),
        [("delivered", DeliveryStatus::Sent), ("relayed", DeliveryStatus::Sent)]
    );
    // Every address in the text is masked, a long text is cut, and at most ten recipients count.
    let long = format!(
        "Action: failed\nStatus: 5.1.1\nDiagnostic-Code: smtp; 550 <Ann.Lee@Example.org>, bob@x.io. {}",
        "z".repeat(900)
    );
    let said = dsn(&long);
    let detail = said[0].4.clone().unwrap();
    assert!(detail.starts_with("5.1.1: smtp; 550 <A*****e@Example.org>, b*b@x.io. zzz"), "{detail}");
    assert_eq!(detail.chars().count(), MAX_DETAIL);
    let many = vec!["Action: failed\nStatus: 5.0.0"; 25].join("\n\n");
    assert_eq!(dsn(&many).len(), MAX_RECIPIENTS);
    // Not-spam and authentication reports are kept, but are not complaints.
    let arf = |kind: &str| {
        let raw = format!(
            "Content-Type: multipart/report; report-type=feedback-report; boundary=b\n\n--b\n\
             Content-Type: message/feedback-report\n\nFeedback-Type: {kind}\nVersion: 1\n--b--\n"
        );
        summary(&parse_report(raw.as_bytes()).unwrap())[0].1
    };
    assert_eq!(arf("not-spam"), DeliveryStatus::Sent);
    assert_eq!(arf("auth-failure"), DeliveryStatus::Sent);
    assert_eq!(arf("fraud"), DeliveryStatus::Complained);
}

#[test]
fn addresses_are_masked_wherever_they_are() {
    assert_eq!(mask_addresses("no address here"), "no address here");
    assert_eq!(mask_addresses("<ann@example.com>: unknown"), "<a*n@example.com>: unknown");
    assert_eq!(mask_addresses("to ann@example.com."), "to a*n@example.com.");
    assert_eq!(mask_addresses("a@b and c@d"), "*@b and *@d");
    assert_eq!(mask_addresses("@ alone, x@ and @y"), "@ alone, x@ and @y");
    assert_eq!(mask_addresses("a*n@example.com"), "a*n@example.com");
    assert_eq!(mask_addresses("élan@exämple.com ok"), "é**n@exämple.com ok");
    assert_eq!(mask_addresses("two@@x"), "two@@x");
    assert_eq!(mask_addresses("'ann@example.com' and `bo@x.io`"), "'a*n@example.com' and `b*@x.io`");
}

#[test]
fn the_delivery_docs_state_the_limits() {
    let docs = include_str!("../../../../../docs/DELIVERY.md");
    let flat = docs.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(&format!("at most {MAX_RECIPIENTS} per report")), "{MAX_RECIPIENTS} recipients");
    assert!(flat.contains(&format!("cut to {MAX_DETAIL} characters")), "{MAX_DETAIL} characters");
}
