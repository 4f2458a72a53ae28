-- One-time passwords. Neither the code nor the raw recipient is stored: the code as
-- HMAC-SHA-256(server secret, salt || code), the recipient as an HMAC (to count sends and
-- failures per recipient) and masked (for the activity feed).
CREATE TABLE otp_transactions (
    id                TEXT PRIMARY KEY,
    tenant_id         TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    application_id    TEXT NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    channel           TEXT NOT NULL,
    recipient_key     TEXT NOT NULL,
    recipient_masked  TEXT NOT NULL,
    salt              TEXT NOT NULL,
    code_hash         TEXT NOT NULL,
    -- sending, sent, verified, expired, tombstoned, failed
    status            TEXT NOT NULL,
    failed_attempts   BIGINT NOT NULL DEFAULT 0,
    failure_reason    TEXT,
    expires_at        BIGINT NOT NULL,
    verified_at       BIGINT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);
CREATE INDEX otp_sends_by_recipient ON otp_transactions (application_id, recipient_key, created_at);

-- Failed verifications per recipient, across transactions (the 24 h limit).
CREATE TABLE otp_failures (
    application_id  TEXT NOT NULL,
    recipient_key   TEXT NOT NULL,
    at              BIGINT NOT NULL
);
CREATE INDEX otp_failures_by_recipient ON otp_failures (application_id, recipient_key, at);

-- One row per recipient: locking it serialises concurrent sends and verifications for that
-- recipient, so the limits hold across daemons.
CREATE TABLE otp_recipients (
    application_id  TEXT NOT NULL,
    recipient_key   TEXT NOT NULL,
    PRIMARY KEY (application_id, recipient_key)
);

-- Per-application OTP messages ({code} and {minutes} are replaced); NULL means the default.
ALTER TABLE applications ADD COLUMN otp_email_subject TEXT;
ALTER TABLE applications ADD COLUMN otp_email_body TEXT;
ALTER TABLE applications ADD COLUMN otp_sms_body TEXT;
