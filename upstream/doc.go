// Package upstream is respgate's HTTP client for vLLM's OpenAI-compatible Responses API
// (docs/design.md §2): it sends the request body it is given, decodes the server-sent events of a stream
// with github.com/tmaxmax/go-sse, bounds every upstream read by size and by time, and classifies
// every failure as an *Error that maps to the client-facing OpenAI envelope (docs/wire.md §6.1,
// docs/style.md "Error envelope").
//
// It owns transport concerns only. It must not know the store, and it does not interpret events:
// reconciling vLLM's dialects is the accumulator's job. The simulator in upstream/vllmsim is a
// separate package.
package upstream
