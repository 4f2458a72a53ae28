-- Dispatch: notifications, their delivery queue and attempts, idempotency keys, templates, and
-- the in-app inbox items that in_app notifications become. Times are epoch milliseconds.

CREATE TABLE notifications (
    id                TEXT PRIMARY KEY,
    tenant_id         TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    application_id    TEXT NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    channel           TEXT NOT NULL,
    -- The raw recipient is kept only to deliver (and retry); it is never returned by the API.
    recipient         TEXT NOT NULL,
    recipient_masked  TEXT NOT NULL,
    sender            TEXT,
    subject           TEXT,
    title             TEXT,
    body              TEXT NOT NULL,
    html_body         TEXT,
    data              TEXT,
    template_id       TEXT,
    status            TEXT NOT NULL,
    failure_reason    TEXT,
    retryable         BOOLEAN NOT NULL DEFAULT FALSE,
    retry_count       BIGINT NOT NULL DEFAULT 0,
    attempt_count     BIGINT NOT NULL DEFAULT 0,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);
CREATE INDEX notifications_by_application ON notifications (application_id, id);

-- The queue: one row per notification that still has to be handed to its provider.
-- state: 'pending' (due at next_attempt_at) or 'leased' (a worker holds it until locked_until).
CREATE TABLE deliveries (
    notification_id  TEXT PRIMARY KEY REFERENCES notifications (id) ON DELETE CASCADE,
    state            TEXT NOT NULL,
    cycle_attempt    BIGINT NOT NULL DEFAULT 0,
    lease_token      BIGINT NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL,
    locked_until     BIGINT
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX deliveries_leased ON deliveries (locked_until) WHERE state = 'leased';

CREATE TABLE delivery_attempts (
    notification_id      TEXT NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    attempt              BIGINT NOT NULL,
    started_at           BIGINT NOT NULL,
    finished_at          BIGINT NOT NULL,
    outcome              TEXT NOT NULL,
    provider_message_id  TEXT,
    error                TEXT,
    PRIMARY KEY (notification_id, attempt)
);

-- Idempotency keys per application: the first response is stored and replayed.
-- status_code is NULL while the first request is still in flight.
CREATE TABLE idempotency_keys (
    application_id  TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_hash    TEXT NOT NULL,
    status_code     BIGINT,
    response_body   TEXT,
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    PRIMARY KEY (application_id, idempotency_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

CREATE TABLE templates (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    subject     TEXT,
    body        TEXT,
    html_body   TEXT,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX templates_by_tenant ON templates (tenant_id, id);

-- Per-user sequence: each user's inbox items are numbered 1, 2, 3… in commit order.
CREATE TABLE inbox_sequences (
    application_id  TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    last_seq        BIGINT NOT NULL,
    PRIMARY KEY (application_id, user_id)
);

CREATE TABLE inbox_items (
    id               TEXT PRIMARY KEY,
    application_id   TEXT NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    user_id          TEXT NOT NULL,
    seq              BIGINT NOT NULL,
    notification_id  TEXT NOT NULL,
    title            TEXT NOT NULL,
    body             TEXT NOT NULL,
    data             TEXT,
    is_read          BOOLEAN NOT NULL DEFAULT FALSE,
    archived         BOOLEAN NOT NULL DEFAULT FALSE,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    UNIQUE (application_id, user_id, seq)
);
