// Package clients runs real OpenAI clients that nobody on this project wrote against respgate
// (make compat; see README.md): openai-node 6.x and 7.x, the OpenAI Agents SDK, the Vercel AI
// SDK and openai-go, and Codex CLI with the codex build tag. Its tests carry the compat build tag,
// so `go test ./...` does not install or run anything from npm. It is not imported by anything.
package clients
