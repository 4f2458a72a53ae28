-- Suppressions (CONTRACT §9): recipients a tenant must not send to on a channel, for every
-- category ('') or one. The raw recipient is never stored: `recipient_key` is an HMAC of the
-- normalised recipient under the server secret (keyed by tenant), `recipient_masked` what the API
-- shows. One entry per (tenant, recipient, channel, category): adding it again changes nothing.
CREATE TABLE suppressions (
    id                TEXT PRIMARY KEY,
    tenant_id         TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    channel           TEXT NOT NULL,
    recipient_key     TEXT NOT NULL,
    recipient_masked  TEXT NOT NULL,
    category          TEXT NOT NULL DEFAULT '',
    reason            TEXT NOT NULL,
    transaction_id    TEXT,
    created_at        BIGINT NOT NULL
);
CREATE UNIQUE INDEX suppressions_by_recipient ON suppressions (tenant_id, recipient_key, channel, category);
CREATE INDEX suppressions_by_tenant ON suppressions (tenant_id, created_at, id);

-- A notification's category (NULL: transactional) and its recipient's key, which the delivery
-- worker's claim matches against the suppressions without computing anything.
ALTER TABLE notifications ADD COLUMN category TEXT;
ALTER TABLE notifications ADD COLUMN recipient_key TEXT;
CREATE INDEX notifications_by_category ON notifications (tenant_id, category, created_at) WHERE category IS NOT NULL;

-- An inbound STOP names only the number: find the tenants that texted it.
CREATE INDEX notifications_by_sms_recipient ON notifications (recipient_key, tenant_id) WHERE channel = 'sms';
