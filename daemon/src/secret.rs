//! The server-side secret: keys OTP hashes and derives applications' signing secrets. Taken
//! from `HERALD_SECRET`, or generated once into `<data_dir>/secret` (mode 0600) and reused.

use std::path::Path;

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
use rand::RngExt;
use sha2::Sha256;

use crate::config::Secret;

#[derive(Clone)]
pub struct ServerSecret(Secret);

impl std::fmt::Debug for ServerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerSecret([redacted])")
    }
}

/// Lower-case hex of `bytes` (the stored form of keys and MACs).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl ServerSecret {
    pub fn new(secret: Secret) -> Self {
        Self(secret)
    }

    /// The configured secret, or the one in the data folder, created on first use.
    pub fn load(configured: Option<&Secret>, data_dir: &Path) -> anyhow::Result<Self> {
        if let Some(secret) = configured {
            return Ok(Self(secret.clone()));
        }
        let path = data_dir.join("secret");
        match std::fs::read_to_string(&path) {
            Ok(text) if text.trim().len() >= 32 => return Ok(Self(Secret::new(text.trim()))),
            Ok(_) => anyhow::bail!(
                "{} holds less than 32 characters; remove it or set HERALD_SECRET",
                path.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
        }
        std::fs::create_dir_all(data_dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", data_dir.display()))?;
        let generated = random_token(32);
        write_private_file(&path, generated.as_bytes())?;
        tracing::info!(path = %path.display(), "generated a new server secret");
        Ok(Self(Secret::new(generated)))
    }

    /// HMAC-SHA-256 of `parts` under the secret, with `purpose` as domain separation.
    pub fn mac(&self, purpose: &str, parts: &[&[u8]]) -> [u8; 32] {
        #[allow(clippy::expect_used)] // HMAC accepts keys of every length: this cannot fail.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(self.0.expose().as_bytes())
            .expect("HMAC takes keys of any length");
        mac.update(purpose.as_bytes());
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }
}

/// `bytes` random bytes from the OS CSPRNG, base64url without padding.
pub fn random_token(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill(&mut buf[..]);
    URL_SAFE_NO_PAD.encode(buf)
}

/// Writes a file readable only by its owner.
pub fn write_private_file(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    file.write_all(contents)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secret_is_kept_and_reused() {
        let dir = std::env::temp_dir().join(format!("herald-secret-{}", herald_common::ids::new_body()));
        let a = ServerSecret::load(None, &dir).unwrap();
        let b = ServerSecret::load(None, &dir).unwrap();
        assert_eq!(a.mac("t", &[b"x"]), b.mac("t", &[b"x"]));
        assert_ne!(a.mac("t", &[b"x"]), a.mac("u", &[b"x"]));
        assert_ne!(a.mac("t", &[b"ab", b"c"]), a.mac("t", &[b"a", b"bc"]));
        assert!(!format!("{a:?}").contains(a.0.expose()));
    }
}
