// Package chaos is respgate's fault matrix (docs/testing.md, "Chaos and soak"): scenarios that
// break the network toward vLLM and Postgres (internal/faultproxy), the client connection and the
// gateway process itself, each on both store backends where it applies and under several seeds.
// After every scenario one auditor reconciles the database with every client transcript and the
// simulator's request log; a violation names the scenario, the seed and the command that replays
// it.
//
// `go test ./integration/chaos/` (part of `make test`) runs one seed per scenario; `make chaos`
// runs the full matrix (CHAOS_SEEDS seeds each) and prints the scenario table; `make soak` runs
// the soak test (SOAK_DURATION). It is a test-only package: nothing imports it.
package chaos
