-- The upstream replica that served a response (docs/fleet.md): the chain's next turn prefers it,
-- since that replica's prefix cache holds the chain. NULL when unknown or with one upstream.
ALTER TABLE responses ADD COLUMN replica TEXT;
