//! The VERP return path (CONTRACT §8): every email Herald sends has the envelope sender
//! `bounces+<token>@<bounce domain>`, whose token names the notification (or OTP transaction)
//! and is signed with the server secret. Mail servers send their delivery status reports and
//! feedback reports to that address, so the bounce listener knows which message a report is
//! about without trusting anything in the report, and refuses any address it did not sign.
//!
//! The token is `<kind><id body>-<mac>`: `n` for a notification or `o` for an OTP transaction,
//! the id's 26 base32 characters, and the first 80 bits of an HMAC-SHA-256 over both, in hex.
//! Only lower-case letters, digits and a dash: mail servers may fold the case of a local part,
//! so it is read lower-cased, and it needs no quoting. `bounces+` and the token make 56
//! characters, within the local part's 64.

use herald_common::ids::{NotificationId, OtpId, TransactionId};
use subtle::ConstantTimeEq;

use crate::secret::{ServerSecret, hex};

/// What every return path's local part starts with.
pub const LOCAL_PREFIX: &str = "bounces+";
/// Domain separation of the token's MAC.
const PURPOSE: &str = "herald.verp.v1";
/// How much of the MAC the token carries: 80 bits, far beyond guessing.
const MAC_BYTES: usize = 10;

/// What a return path says, once checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReturnPath {
    /// One Herald signed: reports to it are about this transaction.
    Signed(TransactionId),
    /// Looks like a return path of this domain (`bounces+…@<bounce domain>`) but the token is
    /// not one Herald signed: forged, altered, or signed with another secret.
    Forged,
    /// Any other address.
    NotOurs,
}

/// The envelope sender for mail about transaction `id`: `bounces+<token>@<domain>`.
pub fn return_path(secret: &ServerSecret, domain: &str, id: &TransactionId) -> String {
    format!("{LOCAL_PREFIX}{}@{domain}", token(secret, id))
}

/// The token naming `id`, signed.
pub fn token(secret: &ServerSecret, id: &TransactionId) -> String {
    let (kind, body) = kind_and_body(id);
    format!("{kind}{body}-{}", hex(&mac(secret, kind, body)))
}

/// Checks `address` (a `RCPT TO` path, without its angle brackets) against the bounce
/// `domain`: case-insensitively, the MAC compared in constant time.
pub fn check(secret: &ServerSecret, domain: &str, address: &str) -> ReturnPath {
    let address = address.to_ascii_lowercase();
    let Some((local, at)) = address.rsplit_once('@') else { return ReturnPath::NotOurs };
    let Some(token) = local.strip_prefix(LOCAL_PREFIX) else { return ReturnPath::NotOurs };
    if !at.eq_ignore_ascii_case(domain.trim_end_matches('.')) {
        return ReturnPath::NotOurs;
    }
    match verify(secret, token) {
        Some(id) => ReturnPath::Signed(id),
        None => ReturnPath::Forged,
    }
}

/// The transaction a (lower-case) token names, if Herald signed it.
fn verify(secret: &ServerSecret, token: &str) -> Option<TransactionId> {
    let (named, given_mac) = token.split_once('-')?;
    if given_mac.len() != 2 * MAC_BYTES || !named.is_char_boundary(1) {
        return None;
    }
    let (kind, body) = named.split_at(1);
    let id = match kind {
        "n" => TransactionId::Notification(
            NotificationId::parse(&format!("{}{body}", NotificationId::PREFIX)).ok()?,
        ),
        "o" => TransactionId::Otp(OtpId::parse(&format!("{}{body}", OtpId::PREFIX)).ok()?),
        _ => return None,
    };
    let expected = hex(&mac(secret, kind, body));
    bool::from(expected.as_bytes().ct_eq(given_mac.as_bytes())).then_some(id)
}

fn kind_and_body(id: &TransactionId) -> (&'static str, &str) {
    match id {
        TransactionId::Notification(id) => ("n", id.as_str().trim_start_matches(NotificationId::PREFIX)),
        TransactionId::Otp(id) => ("o", id.as_str().trim_start_matches(OtpId::PREFIX)),
    }
}

fn mac(secret: &ServerSecret, kind: &str, body: &str) -> [u8; MAC_BYTES] {
    let full = secret.mac(PURPOSE, &[kind.as_bytes(), body.as_bytes()]);
    let mut truncated = [0u8; MAC_BYTES];
    truncated.copy_from_slice(&full[..MAC_BYTES]);
    truncated
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn secret(text: &str) -> ServerSecret {
        ServerSecret::new(Secret::new(text.to_owned()))
    }

    #[test]
    fn a_return_path_names_its_transaction_and_nothing_else() {
        let key = secret("verp-test-secret-verp-test-secret-0001");
        let id = TransactionId::Notification(NotificationId::new());
        let path = return_path(&key, "bounce.example.com", &id);
        let (local, domain) = path.split_once('@').unwrap();
        assert_eq!(domain, "bounce.example.com");
        assert_eq!(local.len(), 56, "within the 64 of a local part: {local}");
        assert!(
            local
                .trim_start_matches(LOCAL_PREFIX)
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{local}"
        );
        assert_eq!(check(&key, "bounce.example.com", &path), ReturnPath::Signed(id.clone()));
        // Mail servers may fold the case of the whole address.
        assert_eq!(check(&key, "bounce.example.com", &path.to_uppercase()), ReturnPath::Signed(id.clone()));
        let otp = TransactionId::Otp(OtpId::new());
        let otp_path = return_path(&key, "bounce.example.com", &otp);
        assert_eq!(check(&key, "Bounce.Example.com", &otp_path), ReturnPath::Signed(otp));

        // Every single-character change of the token is refused.
        let token = local.trim_start_matches(LOCAL_PREFIX);
        for (i, c) in token.char_indices() {
            let other = if c == 'a' { 'b' } else { 'a' };
            let altered = format!("{LOCAL_PREFIX}{}{other}{}@{domain}", &token[..i], &token[i + 1..]);
            assert_eq!(check(&key, domain, &altered), ReturnPath::Forged, "{altered}");
        }
        // Signed with another secret, cut short, the kind swapped, or empty: forged.
        let other_key = return_path(&secret("another-secret-another-secret-another"), domain, &id);
        assert_eq!(check(&key, domain, &other_key), ReturnPath::Forged);
        let short = format!("{}@{domain}", &local[..local.len() - 1]);
        assert_eq!(check(&key, domain, &short), ReturnPath::Forged);
        let swapped = format!("{LOCAL_PREFIX}o{}@{domain}", &token[1..]);
        assert_eq!(check(&key, domain, &swapped), ReturnPath::Forged);
        assert_eq!(check(&key, domain, &format!("{LOCAL_PREFIX}@{domain}")), ReturnPath::Forged);
        assert_eq!(check(&key, domain, &format!("{LOCAL_PREFIX}é-é@{domain}")), ReturnPath::Forged);
        // Another domain, or another local part: not ours at all.
        assert_eq!(check(&key, "other.example.com", &path), ReturnPath::NotOurs);
        assert_eq!(check(&key, domain, &format!("postmaster@{domain}")), ReturnPath::NotOurs);
        assert_eq!(check(&key, domain, "no-at-sign"), ReturnPath::NotOurs);
    }
}
