-- Every feed query filters by tenant first; this index (application, id) served none of them and
-- cost every insert.
DROP INDEX notifications_by_application;
