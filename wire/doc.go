// Package wire holds respgate's Go views of the OpenAI Responses wire format: the create request
// (decoded and validated once, CreateRequest), items kept as their complete raw JSON, streamed
// events, the error envelope and id minting. It is the leaf package: it does no I/O and imports
// nothing else from respgate.
package wire
