//! One-time passwords.

use reqwest::Method;

use super::{Client, ClientError};
use crate::api::otp::{OtpSendIn, OtpSendOut, OtpVerifyIn, OtpVerifyOut};

impl Client {
    pub async fn send_otp(
        &self,
        request: &OtpSendIn,
        idempotency_key: Option<&str>,
    ) -> Result<OtpSendOut, ClientError> {
        let mut builder = self.request(Method::POST, "/api/v1/otp/send").json(request);
        if let Some(key) = idempotency_key {
            builder = builder.header("Idempotency-Key", key);
        }
        Self::send(builder).await
    }

    pub async fn verify_otp(
        &self,
        transaction_id: impl AsRef<str>,
        code: &str,
    ) -> Result<OtpVerifyOut, ClientError> {
        let body = OtpVerifyIn { transaction_id: transaction_id.as_ref().to_owned(), code: code.to_owned() };
        self.post("/api/v1/otp/verify", &body).await
    }
}
