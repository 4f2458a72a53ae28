//! Dispatch and templates.

use reqwest::Method;

use super::{Answer, Client, ClientError, users::encode_path_segment};
use crate::{
    api::{
        notifications::{NotificationAccepted, NotificationIn, NotificationOut},
        templates::{TemplateIn, TemplateListOut, TemplateOut},
    },
    ids::{NotificationId, TemplateId},
};

impl Client {
    /// Dispatches a notification, optionally with an `Idempotency-Key`.
    pub async fn send_notification(
        &self,
        notification: &NotificationIn,
        idempotency_key: Option<&str>,
    ) -> Result<NotificationAccepted, ClientError> {
        self.dispatch(notification, idempotency_key).await.map(|answer| answer.value)
    }

    /// As [`Client::send_notification`], also saying whether the answer replays an earlier
    /// request with the same key (nothing was sent this time).
    pub async fn dispatch(
        &self,
        notification: &NotificationIn,
        idempotency_key: Option<&str>,
    ) -> Result<Answer<NotificationAccepted>, ClientError> {
        let mut request = self.request(Method::POST, "/api/v1/notifications").json(notification);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        Self::answer(request).await
    }

    pub async fn notification(&self, id: &NotificationId) -> Result<NotificationOut, ClientError> {
        self.get(&format!("/api/v1/notifications/{}", encode_path_segment(id.as_str()))).await
    }

    pub async fn create_template(&self, template: &TemplateIn) -> Result<TemplateOut, ClientError> {
        self.post("/api/v1/templates", template).await
    }

    pub async fn template(&self, id: &TemplateId) -> Result<TemplateOut, ClientError> {
        self.get(&format!("/api/v1/templates/{}", encode_path_segment(id.as_str()))).await
    }

    pub async fn templates(&self) -> Result<TemplateListOut, ClientError> {
        self.get("/api/v1/templates").await
    }

    pub async fn replace_template(
        &self,
        id: &TemplateId,
        template: &TemplateIn,
    ) -> Result<TemplateOut, ClientError> {
        let path = format!("/api/v1/templates/{}", encode_path_segment(id.as_str()));
        Self::send(self.request(Method::PUT, &path).json(template)).await
    }

    /// Deletes a template (204 on success).
    pub async fn delete_template(&self, id: &TemplateId) -> Result<(), ClientError> {
        self.delete(&format!("/api/v1/templates/{}", encode_path_segment(id.as_str()))).await
    }
}
