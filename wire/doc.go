// Package wire holds respgate's Go views of the OpenAI Responses wire format: items kept as their
// complete raw JSON, streamed events, the error envelope and id minting. It is the leaf package:
// it does no I/O and imports nothing else from respgate.
package wire
