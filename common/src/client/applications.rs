//! Applications.

use super::{Client, ClientError};
use crate::{
    api::applications::{ApplicationListOut, ApplicationOut},
    ids::ApplicationId,
};

impl Client {
    pub async fn applications(&self) -> Result<ApplicationListOut, ClientError> {
        self.get("/api/v1/applications").await
    }

    pub async fn application(&self, application_id: &ApplicationId) -> Result<ApplicationOut, ClientError> {
        let path =
            format!("/api/v1/applications/{}", super::users::encode_path_segment(application_id.as_str()));
        self.get(&path).await
    }
}
