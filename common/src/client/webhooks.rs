//! Outbound event webhooks: endpoints, their secrets, test events, deliveries and recovery.

use reqwest::Method;

use super::{Client, ClientError, users::encode_path_segment};
use crate::{
    api::webhooks::{
        RecoverIn, RecoverOut, WebhookDeliveryList, WebhookDeliveryQuery, WebhookEndpoint,
        WebhookEndpointCreated, WebhookEndpointIn, WebhookEndpointList, WebhookEndpointPatch, WebhookSecret,
        WebhookTestOut,
    },
    ids::WebhookEndpointId,
};

fn endpoint_path(id: &WebhookEndpointId, tail: &str) -> String {
    format!("/api/v1/webhooks/{}{tail}", encode_path_segment(id.as_str()))
}

impl Client {
    /// Every endpoint of the tenant.
    pub async fn webhooks(&self) -> Result<WebhookEndpointList, ClientError> {
        self.get("/api/v1/webhooks").await
    }

    /// Registers an endpoint; the answer holds its secret, which is never shown again.
    pub async fn add_webhook(
        &self,
        endpoint: &WebhookEndpointIn,
    ) -> Result<WebhookEndpointCreated, ClientError> {
        self.post("/api/v1/webhooks", endpoint).await
    }

    pub async fn webhook(&self, id: &WebhookEndpointId) -> Result<WebhookEndpoint, ClientError> {
        self.get(&endpoint_path(id, "")).await
    }

    pub async fn update_webhook(
        &self,
        id: &WebhookEndpointId,
        patch: &WebhookEndpointPatch,
    ) -> Result<WebhookEndpoint, ClientError> {
        Self::send(self.request(Method::PATCH, &endpoint_path(id, "")).json(patch)).await
    }

    pub async fn remove_webhook(&self, id: &WebhookEndpointId) -> Result<(), ClientError> {
        self.delete(&endpoint_path(id, "")).await
    }

    /// A new secret; the old one still signs, beside it, for the overlap.
    pub async fn rotate_webhook_secret(&self, id: &WebhookEndpointId) -> Result<WebhookSecret, ClientError> {
        Self::send(self.request(Method::POST, &endpoint_path(id, "/rotate-secret"))).await
    }

    /// Sends a `webhook.test` event to the endpoint.
    pub async fn test_webhook(&self, id: &WebhookEndpointId) -> Result<WebhookTestOut, ClientError> {
        Self::send(self.request(Method::POST, &endpoint_path(id, "/test"))).await
    }

    /// One page of the endpoint's messages, newest first, with their attempts.
    pub async fn webhook_deliveries(
        &self,
        id: &WebhookEndpointId,
        query: &WebhookDeliveryQuery,
    ) -> Result<WebhookDeliveryList, ClientError> {
        Self::send(self.request(Method::GET, &endpoint_path(id, "/deliveries")).query(query)).await
    }

    /// Sends again every message to the endpoint that failed since `recover.since`.
    pub async fn recover_webhook(
        &self,
        id: &WebhookEndpointId,
        recover: &RecoverIn,
    ) -> Result<RecoverOut, ClientError> {
        self.post(&endpoint_path(id, "/recover"), recover).await
    }
}
