-- Delivery receipts (CONTRACT §8): what the providers said about a message after accepting it.
-- Every receipt is kept, in arrival order (id), as the item's history; the notification's status
-- moves only up the receipts' precedence (DeliveryStatus::receipt_rank), in the same statement
-- that keeps the receipt.
CREATE TABLE receipts (
    id INTEGER PRIMARY KEY,
    notification_id  TEXT NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    provider         TEXT NOT NULL,
    provider_status  TEXT NOT NULL,
    status           TEXT NOT NULL,
    error_code       TEXT,
    detail           TEXT,
    received_at      BIGINT NOT NULL
);
CREATE INDEX receipts_by_notification ON receipts (notification_id, id);

-- A receipt names the provider's message id (Twilio's MessageSid, WhatsApp's wamid): find its
-- notification by the attempt that got it. Only accepted sends carry one that a provider knows
-- (in-app attempts name their inbox item and stay out of the index).
CREATE INDEX delivery_attempts_by_provider_message
    ON delivery_attempts (provider_message_id) WHERE outcome = 'sent' AND provider_message_id IS NOT NULL;
