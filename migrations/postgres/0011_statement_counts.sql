-- The activity counters' changes (0009) are appended once per statement rather than once per row:
-- a statement that writes a batch of notifications adds one delta per counter it touches, read
-- from the statement's transition tables. Updates count only rows whose status changed.
DROP TRIGGER notifications_counted ON notifications;
DROP TRIGGER notifications_recounted ON notifications;
DROP TRIGGER otp_counted ON otp_transactions;
DROP TRIGGER otp_recounted ON otp_transactions;
DROP FUNCTION herald_count_activity();

-- TG_ARGV[0] is the feed item kind: 'n' notification, 'o' OTP transaction. `changed` is the
-- statement's inserted rows (counted up) or deleted rows (counted down).
CREATE FUNCTION herald_count_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO activity_count_deltas (tenant_id, hour, application_id, kind, channel, status, n)
    SELECT tenant_id, created_at / 3600000, application_id, TG_ARGV[0], channel, status,
           CASE TG_OP WHEN 'DELETE' THEN -COUNT(*) ELSE COUNT(*) END
    FROM changed GROUP BY tenant_id, created_at / 3600000, application_id, channel, status;
    RETURN NULL;
END
$$;

CREATE FUNCTION herald_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO activity_count_deltas (tenant_id, hour, application_id, kind, channel, status, n)
    SELECT tenant_id, hour, application_id, TG_ARGV[0], channel, status, SUM(n)
    FROM (
        SELECT o.tenant_id, o.created_at / 3600000 AS hour, o.application_id, o.channel, o.status, -1 AS n
        FROM before_rows o JOIN after_rows c ON c.id = o.id WHERE o.status IS DISTINCT FROM c.status
        UNION ALL
        SELECT c.tenant_id, c.created_at / 3600000, c.application_id, c.channel, c.status, 1
        FROM before_rows o JOIN after_rows c ON c.id = o.id WHERE o.status IS DISTINCT FROM c.status
    ) AS changes
    GROUP BY tenant_id, hour, application_id, channel, status
    HAVING SUM(n) <> 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER notifications_counted AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION herald_count_rows('n');
CREATE TRIGGER notifications_uncounted AFTER DELETE ON notifications
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION herald_count_rows('n');
CREATE TRIGGER notifications_recounted AFTER UPDATE ON notifications
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_count_updated('n');
CREATE TRIGGER otp_counted AFTER INSERT ON otp_transactions
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION herald_count_rows('o');
CREATE TRIGGER otp_uncounted AFTER DELETE ON otp_transactions
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION herald_count_rows('o');
CREATE TRIGGER otp_recounted AFTER UPDATE ON otp_transactions
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_count_updated('o');
