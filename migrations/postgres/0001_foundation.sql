-- Tenants, applications and API keys. Times are integer epoch milliseconds.
CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE applications (
    id                  TEXT PRIMARY KEY,
    tenant_id           TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name                TEXT NOT NULL,
    signing_generation  BIGINT NOT NULL DEFAULT 1,
    created_at          BIGINT NOT NULL
);
CREATE INDEX applications_by_tenant ON applications (tenant_id, id);

CREATE TABLE api_keys (
    id              TEXT PRIMARY KEY,
    application_id  TEXT NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    secret_hash     TEXT NOT NULL UNIQUE,
    scopes          TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    revoked_at      BIGINT
);
CREATE INDEX api_keys_by_application ON api_keys (application_id);
