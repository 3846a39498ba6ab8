-- What a conversation's turn lease keeps of its turn's input (store.TurnItems): the ids and
-- content digests of the input items that carry a client's id. While the lease is live, adding
-- an item with one of these ids and other content is refused, since the turn's commit appends
-- its own (a conversation never holds two items of one id). NULL when there are none.
ALTER TABLE conversations ADD COLUMN turn_items TEXT;
