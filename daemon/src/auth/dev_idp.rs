//! The development identity provider of `heraldd --dev`: an ES256 key kept in the data folder,
//! its JWKS served by the daemon at `/dev/jwks.json`, and operator tokens minted at start-up.
//! Operator tokens are then verified exactly as a real provider's would be, through the JWKS.
//! [`Es256Key`] is also what the tests' identity provider signs with.

use std::path::Path;

use aws_lc_rs::{
    rand::SystemRandom,
    signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use herald_common::{Scope, Timestamp, ids::TenantId};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use sha2::{Digest, Sha256};

pub const ISSUER: &str = "herald-dev-idp";
pub const AUDIENCE: &str = "herald";
pub const JWKS_PATH: &str = "/dev/jwks.json";

/// An ES256 signing key with its JWK.
pub struct Es256Key {
    pkcs8: Vec<u8>,
    kid: String,
    x: String,
    y: String,
}

impl Es256Key {
    pub fn generate() -> anyhow::Result<Self> {
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .map_err(|_| anyhow::anyhow!("cannot generate an ES256 key"))?;
        Self::from_pkcs8(doc.as_ref())
    }

    pub fn from_pkcs8(pkcs8: &[u8]) -> anyhow::Result<Self> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8)
            .map_err(|_| anyhow::anyhow!("not a P-256 PKCS#8 key"))?;
        // Uncompressed point: 0x04 || x || y.
        let point = pair.public_key().as_ref();
        anyhow::ensure!(point.len() == 65 && point[0] == 4, "unexpected public key encoding");
        let digest = Sha256::digest(point);
        Ok(Self {
            pkcs8: pkcs8.to_vec(),
            kid: URL_SAFE_NO_PAD.encode(&digest[..12]),
            x: URL_SAFE_NO_PAD.encode(&point[1..33]),
            y: URL_SAFE_NO_PAD.encode(&point[33..]),
        })
    }

    /// Loads the key at `path`, creating it on first use.
    pub fn load_or_create(path: &Path) -> anyhow::Result<Self> {
        if let Ok(bytes) = std::fs::read(path) {
            return Self::from_pkcs8(&bytes);
        }
        let key = Self::generate()?;
        crate::secret::write_private_file(path, &key.pkcs8)?;
        Ok(key)
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn jwk(&self) -> serde_json::Value {
        json!({"kty": "EC", "crv": "P-256", "x": self.x, "y": self.y, "kid": self.kid, "alg": "ES256", "use": "sig"})
    }

    pub fn sign(&self, claims: &serde_json::Value) -> anyhow::Result<String> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        Ok(jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_der(&self.pkcs8))?)
    }
}

pub struct DevIdp {
    key: Es256Key,
}

impl DevIdp {
    pub fn load(data_dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)?;
        Ok(Self { key: Es256Key::load_or_create(&data_dir.join("dev-idp.key"))? })
    }

    pub fn jwks(&self) -> serde_json::Value {
        json!({ "keys": [self.key.jwk()] })
    }

    /// An operator token for `tenant_id` with every scope, valid for `ttl_seconds`.
    pub fn operator_token(&self, tenant_id: &TenantId, ttl_seconds: i64) -> anyhow::Result<String> {
        let now = Timestamp::now().seconds();
        self.key.sign(&json!({
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "dev-operator",
            "tenant_id": tenant_id,
            "scope": Scope::join(&Scope::ALL),
            "iat": now,
            "nbf": now,
            "exp": now + ttl_seconds,
        }))
    }
}
