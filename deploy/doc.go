// Package deploy holds the checks of respgate's deployment files and documentation; it has no API.
// Its tests validate, without a Docker engine:
//
//   - docker-compose.yml against the Compose Specification's JSON schema (testdata/compose-spec.json,
//     source in testdata/compose-spec.SOURCE), decoded with goccy/go-yaml (plain scalars YAML 1.1
//     reads differently are rejected) and validated with santhosh-tekuri/jsonschema;
//   - every image, port, environment variable, dependency and healthcheck the compose file and the
//     Dockerfile name, against the code (the binaries' own -h output, the Dockerfile's targets);
//   - the Dockerfile's build commands, run on the build context .dockerignore leaves, producing
//     static binaries;
//   - the compose stack's sim profile, emulated with the real binaries, the compose file's own
//     environment and healthcheck commands, and a real Postgres; and several respgate replicas
//     sharing that Postgres;
//   - every command in README.md and docs/*.md, run against live servers (see docs_test.go for the
//     <!-- doctest: … --> annotations).
//
// healthcheck/ is the static probe the container images use as their HEALTHCHECK.
package deploy
