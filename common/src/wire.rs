//! String-valued enums of the wire contract. Each value has one spelling, used on the wire, in
//! the OpenAPI document and in the database, so nothing outside this crate compares status
//! strings: the daemon parses a stored value once, at the row boundary, and clients match on
//! variants.

/// A string that is not one of an enum's values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not a valid {kind}")]
pub struct UnknownValue {
    pub kind: &'static str,
    pub value: String,
}

impl UnknownValue {
    pub fn new(kind: &'static str, value: &str) -> Self {
        // Bounded: the value may be anything a caller or a corrupt row holds.
        let value: String = value.chars().take(64).collect();
        Self { kind, value }
    }
}

/// Defines a wire enum: each variant with its one spelling (`Queued = "queued"`), `ALL`,
/// `as_str`, `parse`, `Display`, `FromStr`, serde and the OpenAPI schema (which lists the
/// values), and, with the `sql` feature, SQL text-column encoding for both backends.
macro_rules! wire_enum {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:tt,)+ }) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize, utoipa::ToSchema,
        )]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value's one spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// Every spelling, comma-separated (for messages).
            pub fn values() -> String {
                [$($text),+].join(", ")
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::wire::UnknownValue;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Self::parse(text).ok_or_else(|| $crate::wire::UnknownValue::new(stringify!($name), text))
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        /// Compares with a spelling (`status == "sent"`).
        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        $crate::sql::text_column!($name);
    };
}
pub(crate) use wire_enum;
