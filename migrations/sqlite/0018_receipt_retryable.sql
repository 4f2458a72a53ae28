-- A receipt that overtakes the send's own record (the provider calls back in the milliseconds
-- between accepting the message and Herald committing the attempt) finds the notification still
-- `sending`: it is kept but moves nothing. Recording the attempt as `sent` now applies the best
-- such receipt, and for that needs what the receipt said of retrying, which it keeps here.
ALTER TABLE receipts ADD COLUMN retryable BOOLEAN NOT NULL DEFAULT FALSE;
