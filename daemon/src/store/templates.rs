//! Stored templates of a tenant.

use herald_common::ids::{TemplateId, TenantId};

use super::{Store, StoreResult, execute, fetch};

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct TemplateRecord {
    pub id: TemplateId,
    pub tenant_id: TenantId,
    pub name: String,
    pub subject: Option<String>,
    pub body: Option<String>,
    pub html_body: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

super::local::local_row!(TemplateRecord {
    id,
    tenant_id,
    name,
    subject,
    body,
    html_body,
    created_at,
    updated_at
});

impl Store {
    pub async fn create_template(&self, record: TemplateRecord) -> StoreResult<TemplateRecord> {
        let row = record.clone();
        self.write(move |conn| {
            Box::pin(async move {
                execute!(
                    conn,
                    "INSERT INTO templates (id, tenant_id, name, subject, body, html_body, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    &row.id,
                    &row.tenant_id,
                    &row.name,
                    &row.subject,
                    &row.body,
                    &row.html_body,
                    row.created_at,
                    row.updated_at
                )?;
                Ok(())
            })
        })
        .await?;
        Ok(record)
    }

    /// The template `id` of `tenant_id` (another tenant's template is `None`).
    pub async fn get_template(
        &self,
        tenant_id: &TenantId,
        id: &TemplateId,
    ) -> StoreResult<Option<TemplateRecord>> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_optional,
            TemplateRecord,
            "SELECT id, tenant_id, name, subject, body, html_body, created_at, updated_at
             FROM templates WHERE id = $1 AND tenant_id = $2",
            id,
            tenant_id
        )?)
    }

    pub async fn list_templates(&self, tenant_id: &TenantId) -> StoreResult<Vec<TemplateRecord>> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_all,
            TemplateRecord,
            "SELECT id, tenant_id, name, subject, body, html_body, created_at, updated_at
             FROM templates WHERE tenant_id = $1 ORDER BY id LIMIT 1000",
            tenant_id
        )?)
    }

    /// Replaces a template's content; `None` if the tenant has no such template.
    pub async fn replace_template(&self, record: TemplateRecord) -> StoreResult<Option<TemplateRecord>> {
        self.write(move |conn| {
            Box::pin(async move {
                Ok(fetch!(
                    conn,
                    fetch_optional,
                    TemplateRecord,
                    "UPDATE templates SET name = $3, subject = $4, body = $5, html_body = $6, updated_at = $7
                     WHERE id = $1 AND tenant_id = $2
                     RETURNING id, tenant_id, name, subject, body, html_body, created_at, updated_at",
                    &record.id,
                    &record.tenant_id,
                    &record.name,
                    &record.subject,
                    &record.body,
                    &record.html_body,
                    record.updated_at
                )?)
            })
        })
        .await
    }

    pub async fn delete_template(&self, tenant_id: &TenantId, id: &TemplateId) -> StoreResult<bool> {
        let (tenant_id, id) = (tenant_id.clone(), id.clone());
        let deleted = self
            .write(move |conn| {
                Box::pin(async move {
                    Ok(execute!(
                        conn,
                        "DELETE FROM templates WHERE id = $1 AND tenant_id = $2",
                        &id,
                        &tenant_id
                    )?)
                })
            })
            .await?;
        Ok(deleted == 1)
    }
}
