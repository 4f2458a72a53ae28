-- The inbox of one user: newest first by sequence, unread counts, archived items apart.
CREATE INDEX inbox_items_unread ON inbox_items (application_id, user_id, archived, is_read);
