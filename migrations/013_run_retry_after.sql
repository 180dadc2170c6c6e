-- A run whose attempt failed waits before its next one: retry_after is
-- when it may be claimed again (NULL: at once). The scheduler sets it from
-- its --retry-after-seconds, doubled with each failed attempt, so that a
-- failure that passes (a binary being replaced under a worker, a full disk
-- being cleaned, a GPU being reset) does not spend every attempt within a
-- second. An interruption or a lost worker re-queues at once, as before.
ALTER TABLE runs ADD COLUMN retry_after timestamptz;
