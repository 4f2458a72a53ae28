//! API keys: `hk_` followed by 32 random bytes (base64url). Shown once; stored only as the
//! SHA-256 of the whole key, which is also how a presented key is looked up.

use sha2::{Digest, Sha256};

use crate::secret::random_token;

pub const PREFIX: &str = "hk_";

/// A new key's secret text.
pub fn generate() -> String {
    format!("{PREFIX}{}", random_token(32))
}

/// The stored form of a key. Keys have 256 bits of entropy, so a plain hash cannot be brute
/// forced and needs no salt.
pub fn hash(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn looks_like_key(token: &str) -> bool {
    token.starts_with(PREFIX) && token.len() == PREFIX.len() + 43
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_and_hash_stably() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        assert!(looks_like_key(&a));
        assert_eq!(hash(&a), hash(&a));
        assert_eq!(hash(&a).len(), 64);
        assert!(!hash(&a).contains(&a[3..]));
    }
}
