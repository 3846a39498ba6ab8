// Package orsuite runs the Open Responses compliance suite (17 tests: 11 over HTTP, 6 over
// WebSocket) against respgate on its built-in vLLM simulator, twice: with the default
// configuration and with --reasoning-exposure hidden (make orsuite). The suite itself is not in
// this repository: ORSUITE_DIR names the folder holding its run.sh, which installs bun and zod from
// npm into ORSUITE_CACHE on first use. Its test carries the orsuite build tag, so `go test ./...`
// runs nothing from npm. It is not imported by anything.
package orsuite
