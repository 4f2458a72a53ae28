//! DKIM (RFC 6376): generating a domain's RSA-2048 key pair, signing a formatted message with
//! `rsa-sha256` and `relaxed/relaxed` canonicalisation, and (in [`keys`]) keeping private keys
//! encrypted at rest and signers cached. A leaf: sending domains make keys, delivery signs.
//!
//! Signing is ours on top of aws-lc-rs rather than lettre's `dkim` feature, which signs with the
//! `rsa` crate (RUSTSEC-2023-0071, a timing side channel with no fixed release); aws-lc-rs is
//! already the daemon's crypto provider. What it produces is checked in the integration tests by
//! an independent verifier (Python's dkimpy) against the record published in a real DNS server.

pub mod keys;

use aws_lc_rs::{
    encoding::{AsDer, Pkcs8V1Der, PublicKeyX509Der},
    rand::SystemRandom,
    rsa::{KeyPair, KeySize},
    signature::{KeyPair as _, RSA_PKCS1_SHA256},
};
use base64::{Engine, engine::general_purpose::STANDARD};
use sha2::{Digest, Sha256};

/// Header fields signed when present, in this order. `from` is listed twice ("over-signed") so
/// that a From field added after signing breaks the signature.
const SIGNED_FIELDS: &[&str] = &[
    "from",
    "from",
    "reply-to",
    "subject",
    "date",
    "to",
    "cc",
    "message-id",
    "in-reply-to",
    "references",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "list-unsubscribe",
    "list-unsubscribe-post",
];

/// The domain part of an address, lower-cased (the sending domain whose key signs its mail).
pub fn domain_of(address: &str) -> String {
    address.rsplit_once('@').map(|(_, d)| d).unwrap_or_default().trim_end_matches('.').to_ascii_lowercase()
}

/// A new key pair: the private half as PKCS #8 DER, and the text of the public DKIM record.
pub struct GeneratedKey {
    pub pkcs8_der: Vec<u8>,
    /// `v=DKIM1; k=rsa; p=<base64 SubjectPublicKeyInfo>`.
    pub record: String,
}

/// Generates an RSA-2048 key pair (tens of milliseconds of CPU: call it off the async threads).
pub fn generate_key() -> anyhow::Result<GeneratedKey> {
    let pair =
        KeyPair::generate(KeySize::Rsa2048).map_err(|_| anyhow::anyhow!("RSA key generation failed"))?;
    let pkcs8: Pkcs8V1Der<'static> = pair.as_der().map_err(|_| anyhow::anyhow!("cannot encode the key"))?;
    let public: PublicKeyX509Der<'static> =
        pair.public_key().as_der().map_err(|_| anyhow::anyhow!("cannot encode the public key"))?;
    Ok(GeneratedKey { pkcs8_der: pkcs8.as_ref().to_vec(), record: public_record(public.as_ref()) })
}

/// The DKIM TXT record text for a public key (SubjectPublicKeyInfo DER).
pub fn public_record(spki_der: &[u8]) -> String {
    format!("v=DKIM1; k=rsa; p={}", STANDARD.encode(spki_der))
}

/// Signs mail for one domain with one selector.
pub struct DkimSigner {
    domain: String,
    selector: String,
    key: KeyPair,
}

impl std::fmt::Debug for DkimSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DkimSigner(d={}, s={})", self.domain, self.selector)
    }
}

impl DkimSigner {
    pub fn new(domain: &str, selector: &str, pkcs8_der: &[u8]) -> anyhow::Result<Self> {
        let key = KeyPair::from_pkcs8(pkcs8_der).map_err(|e| anyhow::anyhow!("invalid DKIM key: {e}"))?;
        Ok(Self { domain: domain.to_owned(), selector: selector.to_owned(), key })
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// `message` (a formatted RFC 5322 message with CRLF line ends) with a `DKIM-Signature`
    /// field prepended. `now` is the signing time in Unix seconds (the `t=` tag).
    pub fn sign(&self, message: &[u8], now: i64) -> anyhow::Result<Vec<u8>> {
        let (head, body) = split_message(message);
        let fields = header_fields(head);
        let body_hash = STANDARD.encode(Sha256::digest(relaxed_body(body)));

        // Which fields are signed: for each name, the instances from the bottom up (RFC 6376
        // §5.4.2); a name listed more often than it occurs contributes nothing.
        let mut used = vec![false; fields.len()];
        let mut names = Vec::new();
        let mut signed = Vec::new();
        for name in SIGNED_FIELDS {
            let present = fields.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
            if !present {
                continue;
            }
            names.push(*name);
            if let Some(i) =
                (0..fields.len()).rev().find(|&i| !used[i] && fields[i].0.eq_ignore_ascii_case(name))
            {
                used[i] = true;
                signed.extend_from_slice(relaxed_header(fields[i].0, fields[i].1).as_bytes());
                signed.extend_from_slice(b"\r\n");
            }
        }
        if !names.contains(&"from") {
            anyhow::bail!("the message has no From field to sign");
        }

        // The signature field itself is signed with an empty b= (and no final CRLF), folded
        // exactly as it will be written.
        let unsigned = format!(
            "v=1; a=rsa-sha256; c=relaxed/relaxed; d={}; s={}; t={now};\r\n\th={};\r\n\tbh={body_hash};\r\n\tb=",
            self.domain,
            self.selector,
            names.join(":")
        );
        signed.extend_from_slice(relaxed_header("DKIM-Signature", &unsigned).as_bytes());
        let mut signature = vec![0u8; self.key.public_modulus_len()];
        self.key
            .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), &signed, &mut signature)
            .map_err(|_| anyhow::anyhow!("RSA signing failed"))?;
        let encoded = STANDARD.encode(&signature);
        // Fold the signature into lines of 72 characters; verifiers ignore whitespace in b=.
        let folded: Vec<&str> =
            encoded.as_bytes().chunks(72).map(|c| std::str::from_utf8(c).unwrap_or_default()).collect();

        let mut out = Vec::with_capacity(message.len() + 700);
        out.extend_from_slice(b"DKIM-Signature: ");
        out.extend_from_slice(unsigned.as_bytes());
        out.extend_from_slice(folded.join("\r\n\t ").as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(message);
        Ok(out)
    }
}

/// The header block (with its final CRLF) and the body of a message.
fn split_message(message: &[u8]) -> (&[u8], &[u8]) {
    match message.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => (&message[..i + 2], &message[i + 4..]),
        None => (message, &[]),
    }
}

/// The header fields as (name, raw value including continuation lines).
fn header_fields(head: &[u8]) -> Vec<(&str, &str)> {
    let text = std::str::from_utf8(head).unwrap_or_default();
    // Where each field starts: every line that is not a continuation (leading SP or HTAB).
    let mut starts = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive("\r\n") {
        if !line.starts_with([' ', '\t']) {
            starts.push(offset);
        }
        offset += line.len();
    }
    starts.push(text.len());
    starts.windows(2).filter_map(|w| text[w[0]..w[1]].split_once(':')).collect()
}

/// RFC 6376 §3.4.2: lower-case name; unfolded value with whitespace runs collapsed to one space
/// and none at either end; no space around the colon. Without the final CRLF.
fn relaxed_header(name: &str, value: &str) -> String {
    let mut out = name.trim_end().to_ascii_lowercase();
    out.push(':');
    let unfolded = value.replace("\r\n", "");
    let mut last_space = false;
    for c in unfolded.trim_matches([' ', '\t']).chars() {
        if c == ' ' || c == '\t' {
            if !last_space {
                out.push(' ');
            }
            last_space = true;
        } else {
            out.push(c);
            last_space = false;
        }
    }
    out
}

/// RFC 6376 §3.4.4: whitespace runs collapsed, trailing whitespace and trailing empty lines
/// removed, every remaining line ending in CRLF.
fn relaxed_body(body: &[u8]) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let trimmed_body = body.strip_suffix(b"\r\n").unwrap_or(body);
    if !body.is_empty() {
        for line in trimmed_body.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let mut out = Vec::with_capacity(line.len());
            let mut in_space = false;
            for &b in line {
                if b == b' ' || b == b'\t' {
                    in_space = true;
                } else {
                    if in_space {
                        out.push(b' ');
                    }
                    in_space = false;
                    out.push(b);
                }
            }
            lines.push(out);
        }
    }
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let mut out = Vec::with_capacity(body.len());
    for line in lines {
        out.extend_from_slice(&line);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sending_domain_is_the_lower_cased_domain_part() {
        assert_eq!(domain_of("Ann@Mail.Example.COM"), "mail.example.com");
        assert_eq!(domain_of("a@example.com."), "example.com");
    }

    #[test]
    fn relaxed_canonicalisation_follows_rfc_6376_examples() {
        // RFC 6376 §3.4.5.
        let head = b"A: X\r\nB : Y\t\r\n\tZ  \r\n";
        let fields = header_fields(head);
        assert_eq!(relaxed_header(fields[0].0, fields[0].1), "a:X");
        assert_eq!(relaxed_header(fields[1].0, fields[1].1), "b:Y Z");
        assert_eq!(relaxed_body(b" C \r\nD \t E\r\n\r\n\r\n"), b" C\r\nD E\r\n");
        assert_eq!(relaxed_body(b""), b"");
        assert_eq!(relaxed_body(b"\r\n\r\n"), b"");
        assert_eq!(relaxed_body(b"no final newline"), b"no final newline\r\n");
    }

    #[test]
    fn signs_with_the_listed_fields_and_a_body_hash() {
        let key = generate_key().unwrap();
        assert!(key.record.starts_with("v=DKIM1; k=rsa; p=MII"));
        let signer = DkimSigner::new("mail.example.com", "herald", &key.pkcs8_der).unwrap();
        let message = b"From: a@mail.example.com\r\nTo: b@example.org\r\nSubject: Hi\r\n\r\nHello\r\n";
        let signed = String::from_utf8(signer.sign(message, 1_700_000_000).unwrap()).unwrap();
        assert!(signed.starts_with("DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=mail.example.com; s=herald; t=1700000000;"));
        assert!(signed.contains("h=from:from:subject:to;"), "{signed}");
        let body_hash = STANDARD.encode(Sha256::digest(b"Hello\r\n"));
        assert!(signed.contains(&format!("bh={body_hash};")));
        assert!(
            signed.ends_with(
                "\r\nFrom: a@mail.example.com\r\nTo: b@example.org\r\nSubject: Hi\r\n\r\nHello\r\n"
            )
        );
        assert!(signer.sign(b"Subject: no sender\r\n\r\nx", 0).is_err());
    }
}
