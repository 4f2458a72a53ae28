-- Migration 0026 undone in the bench's schema: a batch row past 2 KB is compressed again (pglz),
-- as it was up to 0025. The control for 0026 (docs/PERFORMANCE.md, twenty-eighth session).
ALTER TABLE webhook_event_batches RESET (toast_tuple_target);
