//! Permission scopes carried by API keys and operator tokens (CONTRACT §3).

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
pub enum Scope {
    #[serde(rename = "notifications:send")]
    NotificationsSend,
    #[serde(rename = "notifications:read")]
    NotificationsRead,
    #[serde(rename = "otp:send")]
    OtpSend,
    #[serde(rename = "otp:verify")]
    OtpVerify,
    #[serde(rename = "otp:custom_code")]
    OtpCustomCode,
    #[serde(rename = "domains:read")]
    DomainsRead,
    #[serde(rename = "domains:write")]
    DomainsWrite,
    #[serde(rename = "templates:write")]
    TemplatesWrite,
    #[serde(rename = "users:token")]
    UsersToken,
    #[serde(rename = "activity:read")]
    ActivityRead,
    #[serde(rename = "activity:retry")]
    ActivityRetry,
    #[serde(rename = "suppressions:read")]
    SuppressionsRead,
    #[serde(rename = "suppressions:write")]
    SuppressionsWrite,
    #[serde(rename = "webhooks:read")]
    WebhooksRead,
    #[serde(rename = "webhooks:write")]
    WebhooksWrite,
}

impl Scope {
    pub const ALL: [Scope; 15] = [
        Scope::NotificationsSend,
        Scope::NotificationsRead,
        Scope::OtpSend,
        Scope::OtpVerify,
        Scope::OtpCustomCode,
        Scope::DomainsRead,
        Scope::DomainsWrite,
        Scope::TemplatesWrite,
        Scope::UsersToken,
        Scope::ActivityRead,
        Scope::ActivityRetry,
        Scope::SuppressionsRead,
        Scope::SuppressionsWrite,
        Scope::WebhooksRead,
        Scope::WebhooksWrite,
    ];

    /// Scopes a new key gets when none are named: everything except those that must be asked
    /// for explicitly (`otp:custom_code`, `activity:retry`, the suppression list's, which
    /// lifts what stops sends to people who left, and the webhooks', which send the tenant's
    /// events to a URL of the caller's choosing).
    pub fn defaults() -> Vec<Scope> {
        Self::ALL.into_iter().filter(|s| !s.is_explicit()).collect()
    }

    /// Whether a key gets this scope only when it is named.
    pub const fn is_explicit(self) -> bool {
        matches!(
            self,
            Scope::OtpCustomCode
                | Scope::ActivityRetry
                | Scope::SuppressionsRead
                | Scope::SuppressionsWrite
                | Scope::WebhooksRead
                | Scope::WebhooksWrite
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::NotificationsSend => "notifications:send",
            Scope::NotificationsRead => "notifications:read",
            Scope::OtpSend => "otp:send",
            Scope::OtpVerify => "otp:verify",
            Scope::OtpCustomCode => "otp:custom_code",
            Scope::DomainsRead => "domains:read",
            Scope::DomainsWrite => "domains:write",
            Scope::TemplatesWrite => "templates:write",
            Scope::UsersToken => "users:token",
            Scope::ActivityRead => "activity:read",
            Scope::ActivityRetry => "activity:retry",
            Scope::SuppressionsRead => "suppressions:read",
            Scope::SuppressionsWrite => "suppressions:write",
            Scope::WebhooksRead => "webhooks:read",
            Scope::WebhooksWrite => "webhooks:write",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Parses a space-separated scope list, ignoring scopes Herald does not know (an identity
    /// provider may issue scopes for other services in the same token).
    pub fn parse_list(text: &str) -> Vec<Scope> {
        text.split_whitespace().filter_map(Scope::parse).collect()
    }

    pub fn join(scopes: &[Scope]) -> String {
        scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        Scope::parse(text)
            .ok_or_else(|| format!("unknown scope `{text}`; known scopes: {}", Scope::join(&Scope::ALL)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_text() {
        for scope in Scope::ALL {
            let json = serde_json::to_string(&scope).unwrap();
            assert_eq!(json, format!("\"{}\"", scope.as_str()));
            assert_eq!(Scope::parse(scope.as_str()), Some(scope));
        }
    }

    #[test]
    fn defaults_exclude_the_explicit_scopes() {
        let defaults = Scope::defaults();
        assert!(!defaults.contains(&Scope::OtpCustomCode));
        assert!(!defaults.contains(&Scope::ActivityRetry));
        assert!(!defaults.contains(&Scope::SuppressionsRead));
        assert!(!defaults.contains(&Scope::SuppressionsWrite));
        assert!(!defaults.contains(&Scope::WebhooksRead));
        assert!(!defaults.contains(&Scope::WebhooksWrite));
        assert_eq!(defaults.len(), Scope::ALL.len() - 6);
    }
}
