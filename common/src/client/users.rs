//! End-user tokens.

use super::{Client, ClientError};
use crate::{
    api::users::{CurrentUserOut, UserTokenIn, UserTokenOut},
    ids::UserId,
};

impl Client {
    /// Mints a token for `user_id` (needs an API key with `users:token`).
    pub async fn user_token(
        &self,
        user_id: &UserId,
        ttl_seconds: Option<u32>,
    ) -> Result<UserTokenOut, ClientError> {
        // User ids may hold `@`, `:` and `+`.
        let path = format!("/api/v1/users/{}/token", encode_path_segment(user_id.as_str()));
        self.post(&path, &UserTokenIn { ttl_seconds }).await
    }
}

impl Client {
    /// The user a user token belongs to.
    pub async fn current_user(&self) -> Result<CurrentUserOut, ClientError> {
        self.get("/api/v1/users/me").await
    }
}

/// Percent-encodes a path segment (user ids may hold `@`, `:` and `+`).
pub(crate) fn encode_path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
