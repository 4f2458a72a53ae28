-- The operators' live feed reads a tenant's items by the time they last changed.
CREATE INDEX notifications_changes ON notifications (tenant_id, updated_at, id);
CREATE INDEX otp_changes ON otp_transactions (tenant_id, updated_at, id);

-- Status and channel together (e.g. failed email): without it, one filter is an index range
-- and the other a scan of that range.
CREATE INDEX notifications_feed_status_channel ON notifications (tenant_id, status, channel, created_at, id);
