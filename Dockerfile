# Build: the whole workspace, release profile, with the lockfile's versions.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# The whole tree, less what .dockerignore leaves out (`.ci/docker-context` checks in CI that this
# context compiles).
COPY . .
RUN cargo build --release --locked --bin toolgate

# Run: a slim image, an unprivileged user, the data directory as a volume.
FROM debian:bookworm-slim
# CA certificates: HTTPS webhooks and upstream MCP servers are verified against the system's
# roots (reqwest's rustls-platform-verifier reads /etc/ssl/certs), and the slim image has none.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --home-dir /data toolgate \
    && mkdir -p /data \
    && chown toolgate /data
COPY --from=build /src/target/release/toolgate /usr/local/bin/toolgate
# Mount a config with [[auth.keys]] over this one: without keys the server refuses to listen on
# 0.0.0.0 (see docs/auth.md).
COPY config/default.toml /etc/toolgate/toolgate.toml
USER toolgate
VOLUME ["/data"]
ENV TOOLGATE_DATA_DIR=/data \
    TOOLGATE_BIND=0.0.0.0:8080
EXPOSE 8080
STOPSIGNAL SIGTERM
# Any other subcommand replaces CMD: `docker run --rm -i toolgate hash-token` reads the token
# from standard input (`-i` attaches it) and prints its SHA-256 for `[[auth.keys]]`.
ENTRYPOINT ["toolgate"]
CMD ["serve", "--config", "/etc/toolgate/toolgate.toml"]
