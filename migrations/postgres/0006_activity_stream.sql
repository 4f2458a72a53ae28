-- The operators' live feed reads a tenant's items by the time they last changed.
CREATE INDEX notifications_changes ON notifications (tenant_id, updated_at, id);
CREATE INDEX otp_changes ON otp_transactions (tenant_id, updated_at, id);
