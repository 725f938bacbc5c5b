#!/usr/bin/env bash
# Installs what harp's build and tests need beyond the Rust toolchain, on Debian:
#   - protoc (Debian `protobuf-compiler`) and protobuf's well-known .proto files (Debian
#     `libprotobuf-dev`, /usr/include/google/protobuf/descriptor.proto): etcd-client's build
#     script compiles etcd's .proto files with prost-build, which runs `protoc` (from PATH,
#     or $PROTOC) and needs descriptor.proto and struct.proto on its include path;
#   - etcd (Debian `etcd-server`, /usr/bin/etcd): the etcd membership tests start a real
#     server on loopback.
#   - ip (Debian `iproute2`): tests/tests/multi_host.rs puts node processes on hosts of their
#     own (network namespaces; as root, else those tests skip).
#   - NVRTC, CUDA's run-time compiler (PyPI wheel `nvidia-cuda-nvrtc`, a plain shared
#     library, no GPU or CUDA toolkit needed): harp-kernels' test cuda_nvrtc_compile compiles
#     every CUDA source with it. Unpacked with `pip install --target` into target/nvrtc
#     (ignored by git); scripts/test.sh puts its lib/ directory on LD_LIBRARY_PATH.
#
# Idempotent: installs a package only when what it provides is missing, and exits 0 at once
# when everything is present. Runs apt-get as root directly, through sudo otherwise. Quiet:
# one line per check, apt's output only when it fails.
set -euo pipefail

WELL_KNOWN_PROTO=/usr/include/google/protobuf/descriptor.proto

have_tool() {
    command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ] || [ -x "/usr/sbin/$1" ]
}

# check NAME PACKAGE TEST...: records PACKAGE as missing unless TEST succeeds.
missing=()
check() {
    local name=$1 package=$2
    shift 2
    if "$@"; then
        echo "install-test-deps: $name present"
    else
        missing+=("$package")
    fi
}

check_all() {
    missing=()
    check protoc protobuf-compiler have_tool protoc
    check "protobuf well-known types" libprotobuf-dev test -f "$WELL_KNOWN_PROTO"
    check etcd etcd-server have_tool etcd
    check ip iproute2 have_tool ip
}

# NVRTC wheel for harp-kernels' CUDA compile test (see the header). Pinned to CUDA 13.0, the
# version of the GPU machine; cudarc's loader (feature cuda-13000) finds libnvrtc.so.13.
NVRTC_WHEEL=nvidia-cuda-nvrtc==13.0.88
NVRTC_DIR="$(cd "$(dirname "$0")/.." && pwd)/target/nvrtc"
if [ -f "$NVRTC_DIR/nvidia/cu13/lib/libnvrtc.so.13" ]; then
    echo "install-test-deps: nvrtc present"
else
    echo "install-test-deps: installing $NVRTC_WHEEL into $NVRTC_DIR"
    nvrtc_log="$(mktemp)"
    if ! python3 -m pip install --quiet --disable-pip-version-check --no-deps \
            --target "$NVRTC_DIR" "$NVRTC_WHEEL" >"$nvrtc_log" 2>&1; then
        cat "$nvrtc_log" >&2
        rm -f "$nvrtc_log"
        echo "install-test-deps: pip failed installing $NVRTC_WHEEL" >&2
        exit 1
    fi
    rm -f "$nvrtc_log"
fi

check_all
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo -n)
else
    echo "install-test-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: no apt-get (not Debian?); install by hand: ${missing[*]}" >&2
    exit 1
fi

echo "install-test-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# apt's chatter goes to a log that is shown only when a step fails.
if ! { "${as_root[@]}" apt-get update -qq \
        && "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        >"$log" 2>&1; then
    cat "$log" >&2
    echo "install-test-deps: apt-get failed installing ${missing[*]}" >&2
    exit 1
fi

check_all >/dev/null
if [ "${#missing[@]}" -ne 0 ]; then
    echo "install-test-deps: still missing after apt-get install: ${missing[*]}" >&2
    exit 1
fi
echo "install-test-deps: protoc $(protoc --version 2>/dev/null | awk '{print $2}'), etcd $(etcd --version 2>/dev/null | awk '/etcd Version/ {print $3}')"
