# One image for both roles: `headroom trainer`, `headroom predictor` or
# `headroom serve` (both in one process, the default; with
# SERVER_TYPE=training, as llm-d's chart sets it, the trainer alone). The
# custom EPP's image is llmd/Dockerfile.

# Build stage: a static Go binary. The Go version matches go.mod's go line,
# so the build never fetches another toolchain; override with
# --build-arg GO_VERSION=... only together with go.mod.
ARG GO_VERSION=1.26.8
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV GOTOOLCHAIN=local CGO_ENABLED=0
COPY go.mod go.sum ./
# go.mod replaces the extrapolation guard's module with its directory.
COPY pairs/guard/go.mod pairs/guard/
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/headroom ./cmd/headroom

# Runtime stage: Debian with the xgboost CLI the trainer runs as a subprocess.
FROM debian:bookworm-slim
# A regular (not --system) user: its fixed uid 10001 is outside the system
# range, which useradd --system warns about. Bind-mounted data directories
# must be writable by this uid (README, "Docker").
RUN apt-get update && apt-get install -y --no-install-recommends xgboost ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 headroom \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /data --shell /usr/sbin/nologin headroom \
    && mkdir -p /data && chown headroom:headroom /data
COPY --from=build /out/headroom /usr/local/bin/headroom
# llm-d's router chart starts its prediction-server sidecars as `uvicorn
# APP --host H --port P`: headroom answers to that name as the predictor
# (cmd/headroom/sidecar.go), so this image stands in through the chart's
# image values alone (deploy/llm-d).
RUN ln -s headroom /usr/local/bin/uvicorn
USER 10001:10001
VOLUME /data
ENV HEADROOM_DATA_DIR=/data \
    HEADROOM_TRAINER_LISTEN=0.0.0.0:8000 \
    HEADROOM_PREDICTOR_LISTEN=0.0.0.0:8001
EXPOSE 8000 8001
ENTRYPOINT ["/usr/local/bin/headroom"]
CMD ["serve"]
