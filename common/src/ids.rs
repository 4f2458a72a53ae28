//! Typed, prefixed, time-ordered identifiers (`notif_…`, `tnt_…`). The body is a UUIDv7 in
//! lowercase Crockford base32 (26 characters), so ids sort by creation time as plain strings.

use std::fmt;

/// Why a string is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected an id starting with `{prefix}` followed by 26 base32 characters")]
pub struct IdError {
    pub prefix: &'static str,
}

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Encodes 128 bits as 26 Crockford base32 characters, most significant first, so that the
/// lexical order of the text is the numeric order of the value.
fn encode_base32(value: u128) -> String {
    let mut out = [0u8; 26];
    for (i, slot) in out.iter_mut().enumerate() {
        let shift = 5 * (25 - i);
        *slot = CROCKFORD[((value >> shift) & 0x1f) as usize];
    }
    out.iter().map(|&b| b as char).collect()
}

fn is_base32_body(body: &str) -> bool {
    body.len() == 26
        && body.bytes().all(|b| CROCKFORD.contains(&b))
        // 26 characters hold 130 bits: the first may carry at most 3 bits.
        && body.as_bytes()[0] <= b'7'
}

/// A new time-ordered id body.
pub fn new_body() -> String {
    encode_base32(uuid::Uuid::now_v7().as_u128())
}

/// The smallest id body of time `millis` (Unix milliseconds): every body made at that time or
/// later sorts after it, every body made earlier before it.
pub fn body_at_millis(millis: u64) -> String {
    encode_base32(uuid::Builder::from_unix_timestamp_millis(millis, &[0; 10]).into_uuid().as_u128())
}

/// The impls every text id shares, for a type with `parse(&str) -> Result<Self, $error>` and
/// `as_str(&self) -> &str`: serde through `String`, `FromStr`, `Display`/`Debug` as the text,
/// comparison with `&str`, and SQL text-column encoding.
macro_rules! text_type {
    ($name:ident, $error:ty) => {
        impl TryFrom<String> for $name {
            type Error = $error;
            fn try_from(text: String) -> Result<Self, $error> {
                Self::parse(&text)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.as_str().to_owned()
            }
        }

        impl std::str::FromStr for $name {
            type Err = $error;
            fn from_str(text: &str) -> Result<Self, $error> {
                Self::parse(text)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl utoipa::ToSchema for $name {}

        $crate::sql::text_column!($name);
    };
}

macro_rules! prefixed_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A new id, later than every id made before it by this process.
            #[allow(clippy::new_without_default)]
            pub fn new() -> Self {
                Self(format!("{}{}", $prefix, new_body()))
            }

            pub fn parse(text: &str) -> Result<Self, IdError> {
                match text.strip_prefix($prefix) {
                    Some(body) if is_base32_body(body) => Ok(Self(text.to_owned())),
                    _ => Err(IdError { prefix: $prefix }),
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .pattern(Some(concat!("^", $prefix, "[0-9a-hjkmnp-tv-z]{26}$")))
                    .examples([concat!($prefix, "01jd8x3v7q0000000000000000")])
                    .into()
            }
        }

        text_type!($name, IdError);
    };
}

prefixed_id!(/// A tenant: owns applications, domains and templates.
    TenantId, "tnt_");
prefixed_id!(/// An application: owns API keys, notifications, OTPs and its users' inboxes.
    ApplicationId, "app_");
prefixed_id!(/// An API key (the id, never the secret).
    KeyId, "key_");
prefixed_id!(/// A dispatched notification.
    NotificationId, "notif_");
prefixed_id!(/// An item of a user's in-app inbox.
    InAppId, "inapp_");
prefixed_id!(/// An OTP transaction.
    OtpId, "otp_");
prefixed_id!(/// A stream connection.
    ConnectionId, "con_");
prefixed_id!(/// A custom sending domain.
    DomainId, "dom_");
prefixed_id!(/// A stored template.
    TemplateId, "tpl_");
prefixed_id!(/// An event.
    EventId, "evt_");
prefixed_id!(/// An entry of a tenant's suppression list.
    SuppressionId, "sup_");
prefixed_id!(/// An outbound webhook endpoint.
    WebhookEndpointId, "whe_");
prefixed_id!(/// One webhook message (an event on its way to one endpoint): the `webhook-id` of every
    /// attempt to send it.
    MessageId, "msg_");

impl MessageId {
    /// The id of a stored message, made from its row: its creation time in the first 48 bits (so
    /// ids sort by time, as the others do) and its row number in the last 80. The same row always
    /// gives the same id, so every attempt, and a recovery, sends the same `webhook-id`.
    pub fn of_row(created_at_millis: i64, row: i64) -> Self {
        let millis = u128::from(u64::try_from(created_at_millis).unwrap_or(0)) & 0xffff_ffff_ffff;
        let row = u128::from(u64::try_from(row).unwrap_or(0));
        Self(format!("{}{}", Self::PREFIX, encode_base32((millis << 80) | row)))
    }
}

/// An activity item's id: a notification's or an OTP transaction's.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum TransactionId {
    Notification(NotificationId),
    Otp(OtpId),
}

/// Why a string is not a transaction id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a notification id (`notif_…`) or an OTP transaction id (`otp_…`)")]
pub struct TransactionIdError;

impl TransactionId {
    pub fn parse(text: &str) -> Result<Self, TransactionIdError> {
        NotificationId::parse(text)
            .map(TransactionId::Notification)
            .or_else(|_| OtpId::parse(text).map(TransactionId::Otp))
            .map_err(|_| TransactionIdError)
    }

    pub fn as_str(&self) -> &str {
        match self {
            TransactionId::Notification(id) => id.as_str(),
            TransactionId::Otp(id) => id.as_str(),
        }
    }

    pub fn is_otp(&self) -> bool {
        matches!(self, TransactionId::Otp(_))
    }
}

impl From<NotificationId> for TransactionId {
    fn from(id: NotificationId) -> Self {
        TransactionId::Notification(id)
    }
}

impl From<OtpId> for TransactionId {
    fn from(id: OtpId) -> Self {
        TransactionId::Otp(id)
    }
}

// By reference too, so a call that names an activity item takes `&notification_id` as it is.
impl From<&NotificationId> for TransactionId {
    fn from(id: &NotificationId) -> Self {
        TransactionId::Notification(id.clone())
    }
}

impl From<&OtpId> for TransactionId {
    fn from(id: &OtpId) -> Self {
        TransactionId::Otp(id.clone())
    }
}

impl From<&TransactionId> for TransactionId {
    fn from(id: &TransactionId) -> Self {
        id.clone()
    }
}

impl utoipa::PartialSchema for TransactionId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some("^(notif|otp)_[0-9a-hjkmnp-tv-z]{26}$"))
            .examples(["notif_01jd8x3v7q0000000000000000"])
            .into()
    }
}

text_type!(TransactionId, TransactionIdError);

/// An end user's id, chosen by the integrator (the `recipient` of an `in_app` notification, the
/// `sub` of a user token): 1 to 128 letters, digits and `-_.@:+`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UserId(String);

/// Why a string is not a user id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UserIdError(pub &'static str);

impl UserId {
    pub const MAX_LEN: usize = 128;

    pub fn parse(text: &str) -> Result<Self, UserIdError> {
        if text.is_empty() || text.len() > Self::MAX_LEN {
            return Err(UserIdError("must be 1 to 128 characters"));
        }
        if !text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@:+".contains(&b)) {
            return Err(UserIdError("may contain only letters, digits and - _ . @ : +"));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl utoipa::PartialSchema for UserId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(r"^[A-Za-z0-9\-_.@:+]{1,128}$"))
            .min_length(Some(1))
            .max_length(Some(128))
            .examples(["user_42"])
            .into()
    }
}

text_type!(UserId, UserIdError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_sort_by_time() {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        let (hour_ago, at_now, made) = (body_at_millis(now - 3_600_000), body_at_millis(now), new_body());
        assert!(hour_ago < at_now && at_now <= made, "{hour_ago} {at_now} {made}");
        assert!(is_base32_body(&at_now));
    }

    #[test]
    fn ids_round_trip_and_sort_by_creation() {
        let a = NotificationId::new();
        let b = NotificationId::new();
        assert!(a.as_str().starts_with("notif_"));
        assert_eq!(a.as_str().len(), "notif_".len() + 26);
        assert!(a < b, "{a} should sort before {b}");
        assert_eq!(NotificationId::parse(a.as_str()), Ok(a.clone()));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<NotificationId>(&json).unwrap(), a);
    }

    #[test]
    fn wrong_prefix_or_body_is_rejected() {
        let t = TenantId::new();
        assert!(ApplicationId::parse(t.as_str()).is_err());
        assert!(TenantId::parse("tnt_").is_err());
        assert!(TenantId::parse("tnt_ZZZZZZZZZZZZZZZZZZZZZZZZZZ").is_err());
        assert!(TenantId::parse("tnt_8zzzzzzzzzzzzzzzzzzzzzzzzz").is_err());
        assert!(serde_json::from_str::<TenantId>("\"nope\"").is_err());
    }

    #[test]
    fn transaction_ids_are_notifications_or_otps() {
        let n = NotificationId::new();
        let o = OtpId::new();
        assert_eq!(TransactionId::parse(n.as_str()), Ok(TransactionId::Notification(n.clone())));
        assert!(TransactionId::parse(o.as_str()).unwrap().is_otp());
        assert!(TransactionId::parse(TenantId::new().as_str()).is_err());
        let json = serde_json::to_string(&TransactionId::from(n.clone())).unwrap();
        assert_eq!(json, format!("\"{n}\""));
    }

    #[test]
    fn user_ids_follow_their_alphabet() {
        assert!(UserId::parse("ann@example.com").is_ok());
        assert!(UserId::parse("").is_err());
        assert!(UserId::parse(&"a".repeat(129)).is_err());
        assert!(UserId::parse("a b").is_err());
        assert!(serde_json::from_str::<UserId>("\"a/b\"").is_err());
    }

    #[test]
    fn message_ids_of_rows_are_stable_and_sort_by_time() {
        let a = MessageId::of_row(1_700_000_000_000, 7);
        assert_eq!(a, MessageId::of_row(1_700_000_000_000, 7));
        assert_eq!(MessageId::parse(a.as_str()), Ok(a.clone()));
        assert!(a < MessageId::of_row(1_700_000_000_001, 1));
        assert!(a < MessageId::of_row(1_700_000_000_000, 8));
    }

    #[test]
    fn base32_preserves_order() {
        assert_eq!(encode_base32(0), "0".repeat(26));
        assert!(encode_base32(1) < encode_base32(2));
        assert!(encode_base32(u128::MAX - 1) < encode_base32(u128::MAX));
        assert!(is_base32_body(&encode_base32(u128::MAX)));
    }
}
