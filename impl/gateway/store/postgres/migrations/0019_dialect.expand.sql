-- The API dialect the client spoke on a request event: 'messages' or
-- 'openai'. NULL on events recorded before this column.
ALTER TABLE request_events ADD COLUMN dialect TEXT;
