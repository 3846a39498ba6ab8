# respgate container images. Two targets share one build stage:
#
#   docker build -t respgate .                           # default (last) target: respgate
#   docker build -t respgate-vllm-sim --target vllm-sim .  # the vLLM simulator alone
#
# The respgate image also carries vllm-sim, so one image can play both roles
# (docker run --entrypoint /usr/local/bin/vllm-sim respgate).
#
# Binaries are static (CGO_ENABLED=0; the SQLite driver is pure Go), the final images are
# distroless (no shell, no package manager) and run as the unprivileged user 65532. The containers'
# HEALTHCHECK uses respgate-healthcheck (deploy/healthcheck), a tiny static probe, because the image
# has no curl or wget.
#
# deploy/compose_test.go checks this file against the code: the Go version against go.mod, that the
# build commands below produce static binaries from the build context .dockerignore leaves, the
# ports, users, entrypoints and healthchecks; `make compose-test` builds it with a real engine.
#
# No `# syntax=` line: it makes BuildKit pull the docker/dockerfile frontend image from a registry,
# so the build would fail where none is reachable. The frontend built into the engine's BuildKit
# (Docker 20.10 and later) knows everything used here (RUN --mount=type=cache, FROM --platform).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# No separate `go mod download` layer: it would fetch every module go.mod requires, the linters'
# (go.mod's tool directives) included, several times what the binaries need; the cache mounts keep
# the modules and packages go build fetches and compiles from one build to the next.
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    export CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} && \
    go build -trimpath -ldflags="-s -w" -o /out/respgate ./cmd/respgate && \
    go build -trimpath -ldflags="-s -w" -o /out/vllm-sim ./cmd/vllm-sim && \
    go build -trimpath -ldflags="-s -w" -o /out/respgate-healthcheck ./deploy/healthcheck && \
    mkdir -p /out/home
# /out/home becomes respgate's working directory (the default SQLite store lives in ./data there).

FROM gcr.io/distroless/static-debian12:nonroot AS vllm-sim
COPY --from=build /out/vllm-sim /out/respgate-healthcheck /usr/local/bin/
USER 65532:65532
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/respgate-healthcheck", "http://127.0.0.1:8000/v1/models"]
ENTRYPOINT ["/usr/local/bin/vllm-sim"]
CMD ["--listen", ":8000"]

FROM gcr.io/distroless/static-debian12:nonroot AS respgate
COPY --from=build /out/respgate /out/vllm-sim /out/respgate-healthcheck /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/home /var/lib/respgate
WORKDIR /var/lib/respgate
USER 65532:65532
ENV RESPGATE_LISTEN=:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/respgate-healthcheck"]
ENTRYPOINT ["/usr/local/bin/respgate"]
