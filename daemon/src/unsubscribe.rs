//! One-click unsubscribe tokens (CONTRACT §9, RFC 8058): the `{token}` of
//! `List-Unsubscribe: <{public_url}/u/{token}>`, which every email with a category carries.
//!
//! A token is sealed, not only signed: whoever holds the mail sees the link, and a link that
//! named the tenant, the notification or the recipient's hash in the clear would hand those out
//! to every forwarded copy and every link scanner. It is base64url (no padding) of
//! `version ‖ nonce ‖ AES-256-GCM-SIV(plaintext) ‖ tag`, under a key derived from the server
//! secret (`ServerSecret::mac("herald.unsubscribe.key.v1", [])`), with the version byte as
//! associated data. GCM-SIV rather than GCM because the nonces are random and the number of
//! tokens is unbounded: a repeated nonce under SIV reveals only that two tokens are equal. The
//! plaintext names the tenant, the notification that carried the link, the channel, the
//! recipient's key on the suppression list (never the address), the category, and the masked
//! recipient (what the page and the suppression entry show): about 200 URL-safe characters.
//! Anything that does not open (altered, cut short, another secret, another version) is no
//! token at all.

use aws_lc_rs::aead::{AES_256_GCM_SIV, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use herald_common::{
    api::notifications::Channel,
    ids::{NotificationId, TenantId},
};
use rand::RngExt;

use crate::secret::{ServerSecret, hex};

/// The route of the links, before the token.
pub const PATH_PREFIX: &str = "/u/";
/// What `List-Unsubscribe-Post` says (RFC 8058 §3.1), and the body a one-click POST sends.
pub const ONE_CLICK: &str = "List-Unsubscribe=One-Click";
/// Domain separation of the token key.
const PURPOSE: &str = "herald.unsubscribe.key.v1";
/// The token format; the first byte of every token, and its associated data.
const VERSION: u8 = 1;
/// The AEAD tag's length.
const TAG_LEN: usize = 16;
/// Base32 characters of an id's body.
const ID_BODY: usize = 26;
/// Bytes of a recipient key (a hex HMAC-SHA-256).
const KEY_BYTES: usize = 32;
/// No token Herald makes is longer (a 64-byte category and a 254-byte address masked, in
/// base64): anything longer is refused before it is decoded.
const MAX_TOKEN_CHARS: usize = 640;

/// What a token says: whose list, which recipient (by key), which category.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsubscribe {
    pub tenant_id: TenantId,
    /// The notification whose email carried the link (the entry's `transaction_id`).
    pub notification_id: NotificationId,
    pub channel: Channel,
    /// The recipient's key on the suppression list (lower-case hex).
    pub recipient_key: String,
    pub recipient_masked: String,
    pub category: String,
}

fn cipher(secret: &ServerSecret) -> Option<LessSafeKey> {
    let key = secret.mac(PURPOSE, &[]);
    UnboundKey::new(&AES_256_GCM_SIV, &key).ok().map(LessSafeKey::new)
}

/// The link for `what`: `{public_url}/u/{token}`.
pub fn url(secret: &ServerSecret, public_url: &str, what: &Unsubscribe) -> anyhow::Result<String> {
    Ok(format!("{}{PATH_PREFIX}{}", public_url.trim_end_matches('/'), seal(secret, what)?))
}

/// The sealed token for `what`.
pub fn seal(secret: &ServerSecret, what: &Unsubscribe) -> anyhow::Result<String> {
    let key = decode_hex(&what.recipient_key)
        .filter(|k| k.len() == KEY_BYTES)
        .ok_or_else(|| anyhow::anyhow!("a recipient key is 64 hex characters"))?;
    let category = u8::try_from(what.category.len())
        .ok()
        .filter(|_| !what.category.is_empty())
        .ok_or_else(|| anyhow::anyhow!("a category is 1 to 255 bytes"))?;
    let mut plain = Vec::with_capacity(96 + what.category.len() + what.recipient_masked.len());
    plain.extend_from_slice(body(what.tenant_id.as_str(), TenantId::PREFIX).as_bytes());
    plain.extend_from_slice(body(what.notification_id.as_str(), NotificationId::PREFIX).as_bytes());
    plain.push(channel_byte(what.channel));
    plain.extend_from_slice(&key);
    plain.push(category);
    plain.extend_from_slice(what.category.as_bytes());
    // The mask is the rest.
    plain.extend_from_slice(what.recipient_masked.as_bytes());

    let mut nonce = [0u8; NONCE_LEN];
    rand::rng().fill(&mut nonce[..]);
    cipher(secret)
        .ok_or_else(|| anyhow::anyhow!("cannot set up AES-256-GCM-SIV"))?
        .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from([VERSION]), &mut plain)
        .map_err(|_| anyhow::anyhow!("cannot seal the unsubscribe token"))?;
    let mut token = Vec::with_capacity(1 + NONCE_LEN + plain.len());
    token.push(VERSION);
    token.extend_from_slice(&nonce);
    token.extend_from_slice(&plain);
    Ok(URL_SAFE_NO_PAD.encode(token))
}

/// What `token` says, if Herald sealed it with this secret.
pub fn open(secret: &ServerSecret, token: &str) -> Option<Unsubscribe> {
    if token.len() > MAX_TOKEN_CHARS {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
    let (&version, rest) = bytes.split_first()?;
    if version != VERSION || rest.len() < NONCE_LEN + TAG_LEN {
        return None;
    }
    let (nonce, sealed) = rest.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut sealed = sealed.to_vec();
    let plain = cipher(secret)?.open_in_place(nonce, Aad::from([VERSION]), &mut sealed).ok()?;
    parse(plain)
}

/// Reads a plaintext [`seal`] wrote (authenticated, but read without trusting its lengths).
fn parse(plain: &[u8]) -> Option<Unsubscribe> {
    let (tenant, rest) = split(plain, ID_BODY)?;
    let (notification, rest) = split(rest, ID_BODY)?;
    let (&channel, rest) = rest.split_first()?;
    let (key, rest) = split(rest, KEY_BYTES)?;
    let (&category_len, rest) = rest.split_first()?;
    let (category, masked) = split(rest, usize::from(category_len))?;
    let text = |bytes: &[u8]| std::str::from_utf8(bytes).ok().map(str::to_owned);
    Some(Unsubscribe {
        tenant_id: TenantId::parse(&format!("{}{}", TenantId::PREFIX, text(tenant)?)).ok()?,
        notification_id: NotificationId::parse(&format!("{}{}", NotificationId::PREFIX, text(notification)?))
            .ok()?,
        channel: channel_of(channel)?,
        recipient_key: hex(key),
        category: text(category).filter(|c| !c.is_empty())?,
        recipient_masked: text(masked)?,
    })
}

fn split(bytes: &[u8], at: usize) -> Option<(&[u8], &[u8])> {
    (bytes.len() >= at).then(|| bytes.split_at(at))
}

fn body<'a>(id: &'a str, prefix: &str) -> &'a str {
    id.strip_prefix(prefix).unwrap_or(id)
}

fn channel_byte(channel: Channel) -> u8 {
    Channel::ALL.iter().position(|c| *c == channel).and_then(|i| u8::try_from(i).ok()).unwrap_or(u8::MAX)
}

fn channel_of(byte: u8) -> Option<Channel> {
    Channel::ALL.get(usize::from(byte)).copied()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn secret(text: &str) -> ServerSecret {
        ServerSecret::new(Secret::new(text.to_owned()))
    }

    fn sample() -> Unsubscribe {
        Unsubscribe {
            tenant_id: TenantId::new(),
            notification_id: NotificationId::new(),
            channel: Channel::Email,
            recipient_key: hex(&[0xab; 32]),
            recipient_masked: "a*********h@example.com".to_owned(),
            category: "digest.weekly".to_owned(),
        }
    }

    #[test]
    fn a_token_opens_to_what_was_sealed_and_shows_none_of_it() {
        let key = secret("unsubscribe-test-secret-unsubscribe-01");
        let what = sample();
        let token = seal(&key, &what).unwrap();
        assert_eq!(open(&key, &token), Some(what.clone()));
        assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{token}");
        assert!(token.len() < 220, "compact: {} characters", token.len());
        // Sealed: nothing of the plaintext shows, in the text or in its base64 decoding.
        let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        let tenant_body = body(what.tenant_id.as_str(), TenantId::PREFIX);
        for needle in [tenant_body.as_bytes(), b"example.com", b"digest", &[0xab; 8]] {
            assert!(!raw.windows(needle.len()).any(|w| w == needle), "{needle:?} shows");
        }
        assert!(!token.contains("example") && !token.contains(&what.recipient_key[..8]));
        // Fresh nonces: the same link twice is two tokens, both good.
        let again = seal(&key, &what).unwrap();
        assert_ne!(token, again);
        assert_eq!(open(&key, &again), Some(what.clone()));
        assert_eq!(
            url(&key, "https://herald.example.com/", &what).unwrap().rsplit_once('/').map(|(base, _)| base),
            Some("https://herald.example.com/u")
        );
    }

    #[test]
    fn altered_truncated_or_foreign_tokens_do_not_open() {
        let key = secret("unsubscribe-test-secret-unsubscribe-01");
        let token = seal(&key, &sample()).unwrap();
        // Every single-character change.
        for (i, c) in token.char_indices() {
            let other = if c == 'A' { 'B' } else { 'A' };
            let altered = format!("{}{other}{}", &token[..i], &token[i + 1..]);
            assert_eq!(open(&key, &altered), None, "{altered}");
        }
        // Cut short at every length, or lengthened.
        for end in 0..token.len() {
            assert_eq!(open(&key, &token[..end]), None, "{end}");
        }
        assert_eq!(open(&key, &format!("{token}AA")), None);
        // Another secret; not base64; far too long; empty.
        assert_eq!(open(&secret("another-secret-another-secret-another"), &token), None);
        assert_eq!(open(&key, "not a token!"), None);
        assert_eq!(open(&key, &"A".repeat(10_000)), None);
        assert_eq!(open(&key, ""), None);
        // Keys that are not 32 bytes of hex are not sealed.
        let bad = Unsubscribe { recipient_key: "xyz".into(), ..sample() };
        assert!(seal(&key, &bad).is_err());
    }

    #[test]
    fn plaintexts_are_read_without_trusting_their_lengths() {
        // Authenticated plaintexts are Herald's own, but the reader must not panic on any.
        for len in 0..120 {
            let _ = parse(&vec![0xff; len]);
            let _ = parse(&vec![b'0'; len]);
        }
    }
}
