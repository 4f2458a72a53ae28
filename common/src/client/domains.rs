//! Custom sending domains.

use super::{Client, ClientError, users::encode_path_segment};
use crate::{
    api::domains::{DomainIn, DomainListOut, DomainOut},
    ids::DomainId,
};

impl Client {
    pub async fn create_domain(&self, domain: &DomainIn) -> Result<DomainOut, ClientError> {
        self.post("/api/v1/domains", domain).await
    }

    pub async fn domains(&self) -> Result<DomainListOut, ClientError> {
        self.get("/api/v1/domains").await
    }

    pub async fn domain(&self, id: &DomainId) -> Result<DomainOut, ClientError> {
        self.get(&format!("/api/v1/domains/{}", encode_path_segment(id.as_str()))).await
    }

    /// Checks the domain's records in the DNS now; the domain as it stands after the check.
    pub async fn verify_domain(&self, id: &DomainId) -> Result<DomainOut, ClientError> {
        let path = format!("/api/v1/domains/{}/verify", encode_path_segment(id.as_str()));
        Self::send(self.request(reqwest::Method::POST, &path)).await
    }

    pub async fn delete_domain(&self, id: &DomainId) -> Result<(), ClientError> {
        self.delete(&format!("/api/v1/domains/{}", encode_path_segment(id.as_str()))).await
    }
}
