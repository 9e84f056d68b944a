# syntax=docker/dockerfile:1.7
# The three images of ari, built from this workspace in release mode:
#   docker build --target operator -t ari-operator:0.1.0 .
#   docker build --target executor -t ari-executor:0.1.0 .
#   docker build --target gateway -t ari-gateway:0.1.0 .
# Image names are the chart's defaults (charts/ari/values.yaml: image.repository,
# executor.image.repository and gateway.image.repository). All run as the distroless `nonroot`
# user (65532), the uid the chart and the operator's executor Deployments ask for, on a
# read-only root filesystem.
# e2e/tests/packaging.rs checks this file against the workspace and the chart.

ARG RUST_VERSION=1.95
ARG RUNTIME_BASE=gcr.io/distroless/cc-debian12:nonroot

# One build of the three binaries: they share most of their dependency graph.
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY wit wit
COPY crds crds
COPY model model
COPY runtime runtime
COPY oci oci
COPY plan plan
COPY executor executor
COPY operator operator
COPY gateway gateway
COPY sdk sdk
COPY e2e e2e
COPY testkit testkit
COPY llm llm
COPY mcp mcp
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --release --bin ari-operator --bin ari --bin ari-gateway \
    && mkdir -p /out \
    && cp target/release/ari-operator target/release/ari target/release/ari-gateway /out/

# The stock agent component that runs declarative Agents (docs/declarative.md), built from
# stock/declarative through the public SDK. The operator and the executor images carry
# the same bytes at /usr/share/ari/declarative.wasm: the operator pins their digest in each
# declarative Agent's executors (ARI_MODULE_DIGEST), which refuse any other bytes.
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS stock-agent
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    rustup target add wasm32-wasip2 \
    && cargo build --locked --release --target wasm32-wasip2 \
       --manifest-path stock/Cargo.toml -p declarative --target-dir /tmp/wasm \
    && mkdir -p /out \
    && cp /tmp/wasm/wasm32-wasip2/release/declarative.wasm /out/declarative.wasm

# The operator: Agent and Task controllers, /metrics /healthz /readyz on 8080.
FROM ${RUNTIME_BASE} AS operator
COPY --from=build /out/ari-operator /usr/local/bin/ari-operator
COPY --from=stock-agent /out/declarative.wasm /usr/share/ari/declarative.wasm
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/ari-operator"]

# The executor: `ari worker` in the pods the operator creates (args ["worker"]); also
# `ari run` / `ari verify` for local use. /metrics and /readyz on 8080.
FROM ${RUNTIME_BASE} AS executor
COPY --from=build /out/ari /usr/local/bin/ari
COPY --from=stock-agent /out/declarative.wasm /usr/share/ari/declarative.wasm
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/ari"]
CMD ["worker"]

# The A2A gateway (docs/a2a.md): the A2A endpoints on 8080; /healthz, /readyz and /metrics on
# 8081. Settings come from the environment (ARI_GATEWAY_*), as the chart sets them.
FROM ${RUNTIME_BASE} AS gateway
COPY --from=build /out/ari-gateway /usr/local/bin/ari-gateway
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/ari-gateway"]
