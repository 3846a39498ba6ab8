// Package fleet is respgate's upstream when it is many vLLM servers (docs/fleet.md,
// docs/design.md §10): pools of replicas, each pool serving some models; per turn it picks the
// replica by a routing policy (chain-affine rendezvous hashing with bounded load, least-loaded or
// round-robin), tracks every replica's health (active probes of /health with backoff, passive
// marking on connection failures and 5xx answers), fails a call over to the next replica while
// nothing has reached the client, and aggregates GET /v1/models. A *Fleet is an upstream.Caller.
//
// It owns routing only. It must not store anything, read request bodies, or know tenants beyond
// the opaque routing key the turn hands it (upstream.Route). The policies are pure functions of
// the key and the replicas' state (Rendezvous, ChainAffine, LeastLoaded, RoundRobin), so every
// respgate replica given the same healthy set picks the same vLLM replica for a key.
package fleet
