# syntax=docker/dockerfile:1
# clockd image: static binaries on a small Alpine base (busybox wget for health checks).

ARG GO_VERSION=1.26.8
ARG ALPINE_VERSION=3.22

FROM golang:${GO_VERSION}-alpine AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags='-s -w' -o /out/ ./cmd/clockd ./cmd/clockctl

FROM alpine:${ALPINE_VERSION}
RUN apk add --no-cache ca-certificates tzdata \
 && addgroup -S -g 10001 clockd \
 && adduser -S -D -H -u 10001 -G clockd clockd
COPY --from=build /out/clockd /out/clockctl /usr/local/bin/
COPY config/clockd.yaml /etc/clockd/clockd.yaml
USER clockd:clockd
# The configuration file is read (-config's default); CLOCKD_* variables
# still override any key. Listen on all interfaces inside the container (the
# binary defaults to 127.0.0.1).
ENV CLOCKD_CONFIG=/etc/clockd/clockd.yaml \
    CLOCKD_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD wget -q -T 2 -O /dev/null http://127.0.0.1:8080/readyz || exit 1
ENTRYPOINT ["clockd"]
CMD ["serve"]
