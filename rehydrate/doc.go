// Package rehydrate builds the request respgate sends to vLLM: stored history plus the client's new
// request, turned into one stateless /v1/responses body (store:false, the full input, no
// previous_response_id) that vLLM accepts on both of its input paths (chat-template models and
// gpt-oss harmony). It owns the per-type projection allowlist, the validation that turns what vLLM
// would fail on late into early 400s, reasoning replay (plaintext content only; encrypted_content
// never crosses: respgate's own blobs are opened with the seal ring and their plaintext replayed,
// a foreign one alone is rejected; reasoning.context current_turn leaves out reasoning an
// assistant message follows, docs/reasoning.md), dedupe of replayed items,
// item_reference resolution and the normalised (storable) form of client items (docs/design.md §5,
// docs/wire.md §1.1, §4, §6.4 and its Addendum).
//
// It is pure: it does no I/O, writes nothing, caches nothing across calls, and never changes the
// bytes of the items it is given (wire.Item is immutable). The caller loads history and referenced
// items from the tenant's store beforehand (ReferencedIDs, Lookup). Client faults are
// *wire.APIError values with status 400 and a stable code (the Code* constants); error messages
// name items by position and id, never by content.
package rehydrate
