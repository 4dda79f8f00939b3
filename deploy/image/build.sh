#!/usr/bin/env bash
# make image: the orchard OCI image, built without a Docker daemon. ko
# builds the static binary and writes the image as a tarball (--push=false);
# its base (passwd and group with the non-root user 65532, CA certificates,
# /tmp, User 65532:65532) is assembled by crane into a registry that runs
# in this process's lifetime on loopback, since ko takes its base from a
# registry and none other is reachable here.
set -euo pipefail
cd "$(dirname "$0")/../.."

CRANE="go run github.com/google/go-containerregistry/cmd/crane@v0.21.7"
KO="go run github.com/google/ko@v0.19.1"
OUT=${OUT:-bin/orchard-image.tar}
REPO=${REPO:-ghcr.io/orchardhq/orchard}
export VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
export COMMIT=${COMMIT:-$(git rev-parse --verify -q HEAD || echo unknown)}
export BUILD_DATE=${BUILD_DATE:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}

work=$(mktemp -d)
registry_pid=
cleanup() {
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The base layer.
root=$work/root
mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$root" -cf "$work/base.tar" .

# A registry on loopback for ko to take the base from.
$CRANE registry serve --address 127.0.0.1:0 >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 1 600); do
  port=$(grep -o 'serving on port [0-9]*' "$work/registry.log" | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "image: the local registry did not start" >&2; cat "$work/registry.log" >&2; exit 1; }
base=127.0.0.1:$port/orchard-base
$CRANE append --insecure --oci-empty-base --platform linux/amd64 -f "$work/base.tar" -t "$base:layer" >/dev/null
$CRANE mutate --insecure "$base:layer" --user 65532:65532 --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt -t "$base:latest" >/dev/null

mkdir -p "$(dirname "$OUT")"
KO_DOCKER_REPO=$REPO KO_DEFAULTBASEIMAGE=$base:latest KO_CONFIG_PATH=deploy/image \
  $KO build ./cmd/orchard --bare --push=false --tarball "$OUT" --insecure-registry \
  --platform linux/amd64 --sbom none --tags "$VERSION" \
  --image-label org.opencontainers.image.version="$VERSION" \
  --image-label org.opencontainers.image.revision="$COMMIT" \
  --image-label org.opencontainers.image.source=https://github.com/orchardhq/orchard
echo "image: $OUT ($REPO:$VERSION)"
