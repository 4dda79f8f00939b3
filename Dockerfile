# syntax=docker/dockerfile:1
# The orchard image, built in two stages: a static binary (no cgo), then
# distroless/static as the non-root user 65532 with nothing else in it (no
# shell, no package manager). `make image` builds an equivalent image
# without a Docker daemon (deploy/image/build.sh).
#
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse HEAD) \
#     --build-arg BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t orchard .

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
ARG BUILD_DATE=unknown
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.buildDate=${BUILD_DATE}" \
      -o /out/orchard ./cmd/orchard

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="orchard" \
      org.opencontainers.image.source="https://github.com/orchardhq/orchard" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=build /out/orchard /orchard
USER 65532:65532
EXPOSE 8080 9464 9465 9466
ENTRYPOINT ["/orchard"]
