-- Custom sending domains. A domain's records are derived from its name, selector, challenge
-- token and DKIM key; `checks` holds what the last DNS check found of each (JSON). The DKIM
-- private key is stored encrypted (AES-256-GCM under a key derived from the server secret).
-- `verified_at` is set while the domain may be sent from; `next_check_at` drives the background
-- checks (NULL: none scheduled).
CREATE TABLE domains (
    id                TEXT PRIMARY KEY,
    tenant_id         TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    dkim_selector     TEXT NOT NULL,
    challenge_token   TEXT NOT NULL,
    dkim_record       TEXT NOT NULL,
    dkim_private_key  TEXT NOT NULL,
    status            TEXT NOT NULL,
    checks            TEXT,
    created_at        BIGINT NOT NULL,
    last_checked_at   BIGINT,
    verified_at       BIGINT,
    next_check_at     BIGINT,
    UNIQUE (tenant_id, name)
);
CREATE INDEX domains_due ON domains (next_check_at) WHERE next_check_at IS NOT NULL;
