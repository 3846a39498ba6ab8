// Package chatbridge is the pure half of respgate's Chat Completions front door (docs/chat-completions.md,
// docs/design.md §9, named chatfront there): it translates a Chat Completions request into the Responses request
// vLLM gets and the Responses result back into a chat completion (whole or as chunks), and it
// decides when a visible assistant message may be replaced by the complete output items respgate
// captured when it produced that message (reasoning included).
//
// The identity of a visible history is a scope (tenant fingerprint, model, tools, reasoning
// settings, response format) and a SHA-256 chain over canonical messages, each length-prefixed,
// with the digest recorded at every message boundary (History). A captured turn is a Record: the
// digest before its assistant message (Start), the digest of the history including the envelope
// the client will send back (End), the envelope's own fingerprint, the record it descended from
// (Parent) and the items. Plan matches an incoming history against records.
//
// It does no I/O: records come from the store through the server, and nothing here logs.
// It must not import net/http, the store or the server.
package chatbridge
