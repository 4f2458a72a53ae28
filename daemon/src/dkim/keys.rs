//! DKIM private keys at rest, and the signers built from them.
//!
//! A key is stored as base64(nonce ‖ AES-256-GCM ciphertext ‖ tag), encrypted under a key derived
//! from the server secret and the domain id (`ServerSecret::mac("herald.dkim.key.v1", [id])`),
//! with the domain id as associated data, so a stored key cannot be moved to another domain. A
//! database copy alone yields no signing key; changing `HERALD_SECRET` makes existing keys
//! unusable (delete and add the domain again).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::{Engine, engine::general_purpose::STANDARD};
use rand::RngExt;

use herald_common::ids::{DomainId, TenantId};

use super::DkimSigner;
use crate::secret::ServerSecret;

const PURPOSE: &str = "herald.dkim.key.v1";

fn cipher(secret: &ServerSecret, domain_id: &DomainId) -> anyhow::Result<LessSafeKey> {
    let key = secret.mac(PURPOSE, &[domain_id.as_str().as_bytes()]);
    let key =
        UnboundKey::new(&AES_256_GCM, &key).map_err(|_| anyhow::anyhow!("cannot set up AES-256-GCM"))?;
    Ok(LessSafeKey::new(key))
}

/// Encrypts a private key (PKCS #8 DER) for storage with domain `domain_id`.
pub fn seal(secret: &ServerSecret, domain_id: &DomainId, pkcs8_der: &[u8]) -> anyhow::Result<String> {
    let mut nonce = [0u8; NONCE_LEN];
    rand::rng().fill(&mut nonce[..]);
    let mut sealed = pkcs8_der.to_vec();
    cipher(secret, domain_id)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(domain_id.as_str().as_bytes()),
            &mut sealed,
        )
        .map_err(|_| anyhow::anyhow!("cannot encrypt the DKIM key"))?;
    let mut stored = nonce.to_vec();
    stored.extend_from_slice(&sealed);
    Ok(STANDARD.encode(stored))
}

/// Decrypts what [`seal`] stored.
pub fn open(secret: &ServerSecret, domain_id: &DomainId, stored: &str) -> anyhow::Result<Vec<u8>> {
    let bytes = STANDARD.decode(stored).map_err(|_| anyhow::anyhow!("the stored DKIM key is not base64"))?;
    if bytes.len() <= NONCE_LEN {
        anyhow::bail!("the stored DKIM key is truncated");
    }
    let (nonce, sealed) = bytes.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| anyhow::anyhow!("bad nonce"))?;
    let mut sealed = sealed.to_vec();
    let plain = cipher(secret, domain_id)?
        .open_in_place(nonce, Aad::from(domain_id.as_str().as_bytes()), &mut sealed)
        .map_err(|_| {
            anyhow::anyhow!(
                "the DKIM key cannot be decrypted (was HERALD_SECRET changed since the domain was added?)"
            )
        })?;
    Ok(plain.to_vec())
}

/// How long a looked-up signer (or the absence of one) is reused.
const CACHE_TTL: Duration = Duration::from_secs(30);

/// A cached lookup: when it was made, and the signer (`None`: the domain cannot send).
type CachedSigner = (Instant, Option<Arc<DkimSigner>>);

/// Signers by (tenant, domain name), cached briefly so that sending many messages from one
/// domain does not read and decrypt its key each time. `None` caches "not sendable".
#[derive(Default)]
pub struct SignerCache {
    entries: Mutex<HashMap<(TenantId, String), CachedSigner>>,
}

impl SignerCache {
    pub fn get(&self, tenant_id: &TenantId, name: &str) -> Option<Option<Arc<DkimSigner>>> {
        let entries = self.entries.lock().ok()?;
        let (at, signer) = entries.get(&(tenant_id.clone(), name.to_owned()))?;
        (at.elapsed() < CACHE_TTL).then(|| signer.clone())
    }

    pub fn put(&self, tenant_id: &TenantId, name: &str, signer: Option<Arc<DkimSigner>>) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() > 10_000 {
                entries.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
            }
            entries.insert((tenant_id.clone(), name.to_owned()), (Instant::now(), signer));
        }
    }

    /// Forgets a domain (after a check or a deletion changed whether it may send).
    pub fn forget(&self, tenant_id: &TenantId, name: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(&(tenant_id.clone(), name.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    #[test]
    fn keys_round_trip_only_for_their_domain_and_secret() {
        let secret = ServerSecret::new(Secret::new("a".repeat(32)));
        let (one, two) = (DomainId::new(), DomainId::new());
        let stored = seal(&secret, &one, b"private key bytes").unwrap();
        assert!(!stored.contains("private"));
        assert_eq!(open(&secret, &one, &stored).unwrap(), b"private key bytes");
        assert!(open(&secret, &two, &stored).is_err(), "bound to its domain");
        let other = ServerSecret::new(Secret::new("b".repeat(32)));
        assert!(open(&other, &one, &stored).unwrap_err().to_string().contains("HERALD_SECRET"));
        assert_ne!(seal(&secret, &one, b"x").unwrap(), seal(&secret, &one, b"x").unwrap(), "fresh nonces");
    }
}
