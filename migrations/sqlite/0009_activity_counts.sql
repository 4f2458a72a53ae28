-- Exact counts of each tenant's feed items by hour (activity_counts) and by day
-- (activity_counts_daily) of creation, application, kind (`n` notification, `o` OTP transaction),
-- channel and stored status, kept by triggers in the same transaction as every insert, status
-- change and delete. The activity feed sums them instead of counting rows, and walks the days
-- and hours to find where a deep page starts (store/activity/counts.rs). On SQLite, with its
-- single writer, the triggers update the counters directly, and activity_count_deltas (used on
-- PostgreSQL) stays empty. WITHOUT ROWID: the counters are read in primary-key order, and this
-- way the key holds the count too.
CREATE TABLE activity_counts (
    tenant_id       TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    hour            BIGINT NOT NULL,
    application_id  TEXT NOT NULL,
    kind            TEXT NOT NULL,
    channel         TEXT NOT NULL,
    status          TEXT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, hour, application_id, kind, channel, status)
) WITHOUT ROWID;
CREATE TABLE activity_counts_daily (
    tenant_id       TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    day             BIGINT NOT NULL,
    application_id  TEXT NOT NULL,
    kind            TEXT NOT NULL,
    channel         TEXT NOT NULL,
    status          TEXT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, day, application_id, kind, channel, status)
) WITHOUT ROWID;
CREATE TABLE activity_count_deltas (
    tenant_id       TEXT NOT NULL,
    hour            BIGINT NOT NULL,
    application_id  TEXT NOT NULL,
    kind            TEXT NOT NULL,
    channel         TEXT NOT NULL,
    status          TEXT NOT NULL,
    n               BIGINT NOT NULL
);

INSERT INTO activity_counts (tenant_id, hour, application_id, kind, channel, status, n)
SELECT tenant_id, created_at / 3600000, application_id, 'n', channel, status, COUNT(*)
FROM notifications GROUP BY tenant_id, created_at / 3600000, application_id, channel, status;
INSERT INTO activity_counts (tenant_id, hour, application_id, kind, channel, status, n)
SELECT tenant_id, created_at / 3600000, application_id, 'o', channel, status, COUNT(*)
FROM otp_transactions GROUP BY tenant_id, created_at / 3600000, application_id, channel, status;
INSERT INTO activity_counts_daily (tenant_id, day, application_id, kind, channel, status, n)
SELECT tenant_id, created_at / 86400000, application_id, 'n', channel, status, COUNT(*)
FROM notifications GROUP BY tenant_id, created_at / 86400000, application_id, channel, status;
INSERT INTO activity_counts_daily (tenant_id, day, application_id, kind, channel, status, n)
SELECT tenant_id, created_at / 86400000, application_id, 'o', channel, status, COUNT(*)
FROM otp_transactions GROUP BY tenant_id, created_at / 86400000, application_id, channel, status;

CREATE TRIGGER notifications_counted AFTER INSERT ON notifications BEGIN
    INSERT INTO activity_counts (tenant_id, hour, application_id, kind, channel, status, n)
    VALUES (NEW.tenant_id, NEW.created_at / 3600000, NEW.application_id, 'n', NEW.channel, NEW.status, 1)
    ON CONFLICT (tenant_id, hour, application_id, kind, channel, status) DO UPDATE SET n = n + 1;
    INSERT INTO activity_counts_daily (tenant_id, day, application_id, kind, channel, status, n)
    VALUES (NEW.tenant_id, NEW.created_at / 86400000, NEW.application_id, 'n', NEW.channel, NEW.status, 1)
    ON CONFLICT (tenant_id, day, application_id, kind, channel, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER notifications_recounted AFTER UPDATE OF status ON notifications
WHEN OLD.status <> NEW.status BEGIN
    UPDATE activity_counts SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND hour = OLD.created_at / 3600000 AND application_id = OLD.application_id
      AND kind = 'n' AND channel = OLD.channel AND status = OLD.status;
    UPDATE activity_counts_daily SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND day = OLD.created_at / 86400000 AND application_id = OLD.application_id
      AND kind = 'n' AND channel = OLD.channel AND status = OLD.status;
    INSERT INTO activity_counts (tenant_id, hour, application_id, kind, channel, status, n)
    VALUES (NEW.tenant_id, NEW.created_at / 3600000, NEW.application_id, 'n', NEW.channel, NEW.status, 1)
    ON CONFLICT (tenant_id, hour, application_id, kind, channel, status) DO UPDATE SET n = n + 1;
    INSERT INTO activity_counts_daily (tenant_id, day, application_id, kind, channel, status, n)
    VALUES (NEW.tenant_id, NEW.created_at / 86400000, NEW.application_id, 'n', NEW.channel, NEW.status, 1)
    ON CONFLICT (tenant_id, day, application_id, kind, channel, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER notifications_uncounted AFTER DELETE ON notifications BEGIN
    UPDATE activity_counts SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND hour = OLD.created_at / 3600000 AND application_id = OLD.application_id
      AND kind = 'n' AND channel = OLD.channel AND status = OLD.status;
    UPDATE activity_counts_daily SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND day = OLD.created_at / 86400000 AND application_id = OLD.application_id
      AND kind = 'n' AND channel = OLD.channel AND status = OLD.status;
END;
CREATE TRIGGER otp_counted AFTER INSERT ON otp_transactions BEGIN
    INSERT INTO activity_counts (tenant_id, hour, application_id, kind, channel, status, n)
    VALUES (NEW.tenant_id, NEW.created_at / 3600000, NEW.application_id, 'o', NEW.channel, NEW.status, 1)
    ON CONFLICT (tenant_id, hour, application_id, kind, channel, status) DO UPDATE SET n = n + 1;
    INSERT INTO activity_counts_daily (tenant_id, day, application_id, kind, channel, status, n)
    VALUES (NEW.tenant_id, NEW.created_at / 86400000, NEW.application_id, 'o', NEW.channel, NEW.status, 1)
    ON CONFLICT (tenant_id, day, application_id, kind, channel, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER otp_recounted AFTER UPDATE OF status ON otp_transactions
WHEN OLD.status <> NEW.status BEGIN
    UPDATE activity_counts SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND hour = OLD.created_at / 3600000 AND application_id = OLD.application_id
      AND kind = 'o' AND channel = OLD.channel AND status = OLD.status;
    UPDATE activity_counts_daily SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND day = OLD.created_at / 86400000 AND application_id = OLD.application_id
      AND kind = 'o' AND channel = OLD.channel AND status = OLD.status;
    INSERT INTO activity_counts (tenant_id, hour, application_id, kind, channel, status, n)
    VALUES (NEW.tenant_id, NEW.created_at / 3600000, NEW.application_id, 'o', NEW.channel, NEW.status, 1)
    ON CONFLICT (tenant_id, hour, application_id, kind, channel, status) DO UPDATE SET n = n + 1;
    INSERT INTO activity_counts_daily (tenant_id, day, application_id, kind, channel, status, n)
    VALUES (NEW.tenant_id, NEW.created_at / 86400000, NEW.application_id, 'o', NEW.channel, NEW.status, 1)
    ON CONFLICT (tenant_id, day, application_id, kind, channel, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER otp_uncounted AFTER DELETE ON otp_transactions BEGIN
    UPDATE activity_counts SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND hour = OLD.created_at / 3600000 AND application_id = OLD.application_id
      AND kind = 'o' AND channel = OLD.channel AND status = OLD.status;
    UPDATE activity_counts_daily SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND day = OLD.created_at / 86400000 AND application_id = OLD.application_id
      AND kind = 'o' AND channel = OLD.channel AND status = OLD.status;
END;
