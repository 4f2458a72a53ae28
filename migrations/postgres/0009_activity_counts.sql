-- Exact counts of each tenant's feed items by hour (activity_counts) and by day
-- (activity_counts_daily) of creation, application, kind (`n` notification, `o` OTP transaction),
-- channel and stored status. The activity feed sums them instead of counting rows, and walks the
-- days and hours to find where a deep page starts (store/activity/counts.rs). Triggers append one
-- row per change to activity_count_deltas (inserts never wait on each other, so concurrent writers
-- do not queue behind a hot counter row); a background task folds the deltas into both tables
-- every second, and readers add the deltas not folded yet, in one snapshot, so counts are exact
-- at every moment.
CREATE TABLE activity_counts (
    tenant_id       TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    hour            BIGINT NOT NULL,
    application_id  TEXT NOT NULL,
    kind            TEXT NOT NULL,
    channel         TEXT NOT NULL,
    status          TEXT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, hour, application_id, kind, channel, status)
);
CREATE TABLE activity_counts_daily (
    tenant_id       TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    day             BIGINT NOT NULL,
    application_id  TEXT NOT NULL,
    kind            TEXT NOT NULL,
    channel         TEXT NOT NULL,
    status          TEXT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, day, application_id, kind, channel, status)
);
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

CREATE FUNCTION herald_count_activity() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind TEXT := CASE WHEN TG_TABLE_NAME = 'notifications' THEN 'n' ELSE 'o' END;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO activity_count_deltas VALUES
            (NEW.tenant_id, NEW.created_at / 3600000, NEW.application_id, kind, NEW.channel, NEW.status, 1);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO activity_count_deltas VALUES
            (OLD.tenant_id, OLD.created_at / 3600000, OLD.application_id, kind, OLD.channel, OLD.status, -1);
    ELSE
        INSERT INTO activity_count_deltas VALUES
            (OLD.tenant_id, OLD.created_at / 3600000, OLD.application_id, kind, OLD.channel, OLD.status, -1),
            (NEW.tenant_id, NEW.created_at / 3600000, NEW.application_id, kind, NEW.channel, NEW.status, 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER notifications_counted AFTER INSERT OR DELETE ON notifications
    FOR EACH ROW EXECUTE FUNCTION herald_count_activity();
CREATE TRIGGER notifications_recounted AFTER UPDATE OF status ON notifications
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION herald_count_activity();
CREATE TRIGGER otp_counted AFTER INSERT OR DELETE ON otp_transactions
    FOR EACH ROW EXECUTE FUNCTION herald_count_activity();
CREATE TRIGGER otp_recounted AFTER UPDATE OF status ON otp_transactions
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION herald_count_activity();
