// Package loadgen drives POST /v1/responses at a chosen concurrency against any base URL and
// measures every request from the client's side: time to first byte (response headers), time to
// first delta event, every gap between consecutive events, end-to-end time, event count and
// bytes. Each streamed answer is checked as it arrives (Checker): a lost, reordered, duplicated
// or truncated event, a delta whose item was never announced, or deltas that do not add up to the
// terminal response's output fail the request. It also reads a process's CPU time and RSS from
// /proc (ReadProc), so a caller can charge a server for the work a run made it do.
//
// It depends on nothing of respgate but bench/stats, the statistics it shares with cmd/benchrun.
// cmd/loadgen is its command line; cmd/benchrun uses it to compare respgate with a direct
// connection and a bare reverse proxy (`make bench`).
//
// Absolute times on a shared machine are noisy; callers should compare arms measured side by side
// in one run (differences and ratios), never absolute figures across runs.
package loadgen
