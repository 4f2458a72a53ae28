//! The suppression list: its pages, adding an entry (saying whether it was new) and lifting one.

use reqwest::{Method, StatusCode};

use super::{Client, ClientError, decode, execute, users::encode_path_segment};
use crate::{
    api::suppressions::{Suppression, SuppressionIn, SuppressionList, SuppressionQuery},
    ids::SuppressionId,
};

/// What `POST /api/v1/suppressions` answered: the entry, and whether this call created it (201)
/// or found the same one already there (200).
#[derive(Clone, Debug)]
pub struct SuppressionAdded {
    pub suppression: Suppression,
    pub created: bool,
}

impl Client {
    /// One page of the list, newest first.
    pub async fn suppressions(&self, query: &SuppressionQuery) -> Result<SuppressionList, ClientError> {
        Self::send(self.request(Method::GET, "/api/v1/suppressions").query(query)).await
    }

    pub async fn suppression(&self, id: &SuppressionId) -> Result<Suppression, ClientError> {
        self.get(&format!("/api/v1/suppressions/{}", encode_path_segment(id.as_str()))).await
    }

    pub async fn add_suppression(&self, entry: &SuppressionIn) -> Result<SuppressionAdded, ClientError> {
        let response = execute(self.request(Method::POST, "/api/v1/suppressions").json(entry)).await?;
        let created = response.status() == StatusCode::CREATED;
        let status = response.status();
        let bytes = response.bytes().await?;
        decode(status, &bytes).map(|suppression| SuppressionAdded { suppression, created })
    }

    /// Lifts the entry: sends to the recipient resume.
    pub async fn delete_suppression(&self, id: &SuppressionId) -> Result<(), ClientError> {
        self.delete(&format!("/api/v1/suppressions/{}", encode_path_segment(id.as_str()))).await
    }
}
