# syntax=docker/dockerfile:1.7
#
# agentry image: ghcr.io/agentry-dev/agentry:<version>
#
#   docker build -t ghcr.io/agentry-dev/agentry:0.1.0 .
#
# Needs BuildKit (the default builder since Docker 23) for the cache mounts.

############################ build ############################
FROM rust:1.95-bookworm AS build

WORKDIR /src
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0

# Dependencies first: this layer only changes when Cargo.toml or Cargo.lock does.
# The crate registry lives in a cache mount so it is shared across builds.
COPY Cargo.toml Cargo.lock ./
RUN --mount=type=cache,id=agentry-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=agentry-cargo-git,target=/usr/local/cargo/git \
    cargo fetch --locked

# Then the sources. build.rs compiles proto/ with protox, so no protoc is needed, and
# SQLite is compiled in, so the runtime image needs no shared library beyond libc.
# target/ is a cache mount too, so unchanged dependencies are not rebuilt; the binary
# is copied out of it because a cache mount is not part of the image.
COPY . .
RUN --mount=type=cache,id=agentry-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=agentry-cargo-git,target=/usr/local/cargo/git \
    --mount=type=cache,id=agentry-target,target=/src/target \
    cargo build --release --locked --bin agentry \
 && install -D -m 0755 target/release/agentry /out/agentry

############################ runtime ############################
# glibc + libgcc, no shell, no package manager; bookworm, like the build stage.
FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="agentry" \
      org.opencontainers.image.description="gRPC registry of agent personas and supervisor of their workers" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"

COPY --from=build /out/agentry /usr/local/bin/agentry

# The distroless nonroot user; numeric so that runAsNonRoot can check it.
USER 65532:65532
EXPOSE 50051

ENTRYPOINT ["/usr/local/bin/agentry"]
CMD ["serve"]
