//! Wire timestamps: ISO 8601 UTC with milliseconds and `Z` (`2026-11-22T10:15:30.123Z`), held as
//! integer epoch milliseconds, which is also how the store keeps times it compares or sorts.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::{OffsetDateTime, format_description::well_known::Rfc3339, macros::format_description};

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub fn from_millis(millis: i64) -> Self {
        Self(millis)
    }

    pub fn now() -> Self {
        Self((OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64)
    }

    pub fn millis(self) -> i64 {
        self.0
    }

    pub fn seconds(self) -> i64 {
        self.0.div_euclid(1000)
    }

    pub fn plus_millis(self, millis: i64) -> Self {
        Self(self.0.saturating_add(millis))
    }

    pub fn parse(text: &str) -> Result<Self, time::error::Parse> {
        let parsed = OffsetDateTime::parse(text, &Rfc3339)?;
        Ok(Self((parsed.unix_timestamp_nanos() / 1_000_000) as i64))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let format =
            format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
        let when = OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0) * 1_000_000)
            .map_err(|_| fmt::Error)?;
        f.write_str(&when.format(&format).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::DateTime)))
            .examples(["2026-11-22T10:15:30.123Z"])
            .into()
    }
}

impl utoipa::ToSchema for Timestamp {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_z_and_parses_back() {
        let t = Timestamp::from_millis(1_795_342_530_123);
        let text = t.to_string();
        assert_eq!(text, "2026-11-22T10:15:30.123Z");
        assert_eq!(Timestamp::parse(&text).unwrap(), t);
        assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{text}\""));
    }
}
