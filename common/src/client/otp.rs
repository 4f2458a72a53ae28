//! One-time passwords.

use reqwest::Method;

use super::{Client, ClientError};
use crate::{
    api::otp::{OtpSendIn, OtpSendOut, OtpVerifyIn, OtpVerifyOut},
    ids::OtpId,
};

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

    pub async fn verify_otp(&self, transaction_id: &OtpId, code: &str) -> Result<OtpVerifyOut, ClientError> {
        let body = OtpVerifyIn { transaction_id: transaction_id.to_string(), code: code.to_owned() };
        self.post("/api/v1/otp/verify", &body).await
    }
}
