-- The activity feed reads notifications and OTP transactions of a tenant, newest first, with
-- optional filters on channel, status and application. One index per filter keeps every
-- combination an index range scan, for both the page and the exact count.
CREATE INDEX notifications_feed ON notifications (tenant_id, created_at, id);
CREATE INDEX notifications_feed_status ON notifications (tenant_id, status, created_at, id);
CREATE INDEX notifications_feed_channel ON notifications (tenant_id, channel, created_at, id);
CREATE INDEX notifications_feed_application ON notifications (tenant_id, application_id, created_at, id);
CREATE INDEX otp_feed ON otp_transactions (tenant_id, created_at, id);
CREATE INDEX otp_feed_status ON otp_transactions (tenant_id, status, created_at, id);
CREATE INDEX otp_feed_channel ON otp_transactions (tenant_id, channel, created_at, id);
CREATE INDEX otp_feed_application ON otp_transactions (tenant_id, application_id, created_at, id);
