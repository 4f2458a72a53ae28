//! Health and identity.

use super::{Client, ClientError};
use crate::api::{health::HealthOut, whoami::WhoamiOut};

impl Client {
    pub async fn healthz(&self) -> Result<HealthOut, ClientError> {
        self.get("/healthz").await
    }

    pub async fn readyz(&self) -> Result<HealthOut, ClientError> {
        self.get("/readyz").await
    }

    pub async fn whoami(&self) -> Result<WhoamiOut, ClientError> {
        self.get("/api/v1/whoami").await
    }

    pub async fn openapi(&self) -> Result<serde_json::Value, ClientError> {
        self.get("/content/openapi.json").await
    }
}
