//! With the `sql` feature: the wire types as SQL text columns, for sqlx (SQLite and PostgreSQL)
//! and rusqlite. A stored value is parsed when the row is read, so a corrupt value fails the read
//! with a decode error naming the column, instead of travelling on as a string.

/// Implements text-column encoding and decoding for a type with `AsRef<str>` and `FromStr`.
#[cfg(feature = "sql")]
macro_rules! text_column {
    ($ty:ty) => {
        impl<DB: sqlx::Database> sqlx::Type<DB> for $ty
        where
            str: sqlx::Type<DB>,
        {
            fn type_info() -> <DB as sqlx::Database>::TypeInfo {
                <str as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &<DB as sqlx::Database>::TypeInfo) -> bool {
                <str as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $ty
        where
            for<'a> &'a str: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<'q, DB>>::encode_by_ref(&AsRef::<str>::as_ref(self), buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $ty
        where
            &'r str: sqlx::Decode<'r, DB>,
        {
            fn decode(value: <DB as sqlx::Database>::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&'r str as sqlx::Decode<'r, DB>>::decode(value)?;
                Ok(text.parse::<$ty>()?)
            }
        }

        impl rusqlite::types::ToSql for $ty {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(AsRef::<str>::as_ref(self)))
            }
        }

        impl rusqlite::types::FromSql for $ty {
            fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                value.as_str()?.parse::<$ty>().map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
            }
        }
    };
}

#[cfg(not(feature = "sql"))]
macro_rules! text_column {
    ($ty:ty) => {};
}

pub(crate) use text_column;
