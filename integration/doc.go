// Package integration holds respgate's end-to-end tests: the real server in-process (and the real
// binary where a process must die), the vLLM simulator, real Postgres and SQLite, and openai-go as
// the client. It is not imported by anything.
package integration
