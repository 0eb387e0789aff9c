# Build stage: a static Go binary.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/headroom ./cmd/headroom

# Runtime stage: Debian with the xgboost CLI the trainer runs as a subprocess.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends xgboost ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /data --uid 10001 headroom \
    && mkdir -p /data && chown headroom /data
COPY --from=build /out/headroom /usr/local/bin/headroom
USER headroom
VOLUME /data
ENV HEADROOM_DATA_DIR=/data \
    HEADROOM_TRAINER_LISTEN=0.0.0.0:8000 \
    HEADROOM_PREDICTOR_LISTEN=0.0.0.0:8001
EXPOSE 8000 8001
ENTRYPOINT ["/usr/local/bin/headroom"]
CMD ["serve"]
