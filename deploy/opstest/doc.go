// Package opstest checks the operator's files under deploy/ that need heavy dependencies: the Helm
// chart (deploy/helm/respgate), rendered with Helm's Go library and decoded strictly into the
// Kubernetes API types, and the Grafana dashboard and Prometheus alert rules (deploy/grafana,
// deploy/prometheus), whose PromQL is parsed with the Prometheus parser and checked against the
// series a live respgate exports; each alert rule is also evaluated with Prometheus's rule
// evaluation over synthetic series, to fire when it should and only then.
//
// It is its own Go module so that Helm, the Kubernetes API types and Prometheus stay out of
// respgate's go.mod: `make deploy-test` runs it, the last step of `make test`. It has no API.
package opstest
