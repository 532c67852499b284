#!/bin/bash
# Build a TensorFlow CPU wheel from source with AVX2 and FMA (Dockerfile.cpu-avx2).
#
#   TF_VERSION   release tag without the v (2.21.0); the Bazel version comes from that
#                release's .bazelversion (bazelisk reads it), the compiler is the clang
#                that release is built with (LLVM_VERSION, 18 for 2.20/2.21).
#   TF_COPTS     compiler flags ("-mavx2 -mfma"); never -march=native in an image.
#   BAZEL_JOBS, BAZEL_RAM_MB   resource limits so a small builder does not thrash.
#   BAZELISK_SHA256   sha256 of bazelisk v1.25.0 linux-amd64, from its release page
#   LLVM_SH_URL, LLVM_SH_SHA256   apt.llvm.org's llvm.sh at a pinned commit of llvm-project
#                (e.g. https://raw.githubusercontent.com/llvm/llvm-project/<commit>/llvm/utils/llvm.sh)
#                and its sha256. Downloads are verified and never run unverified: the
#                checksums are required (mxbench ships none it could not check itself).
# Output: /out/tensorflow_cpu-*.whl. Expect hours (about 1-2 h on 16 cores, 6-10 h on 2),
# about 30 GB of disk under /root/.cache/bazel and >= 2 GB RAM per job (estimates).
set -euo pipefail
: "${TF_VERSION:?}" "${TF_COPTS:?}" "${LLVM_VERSION:?}" "${BAZEL_JOBS:?}" "${BAZEL_RAM_MB:?}"
: "${BAZELISK_SHA256:?set the build arg BAZELISK_SHA256 (bazelisk v1.25.0 release checksum)}"
: "${LLVM_SH_URL:?set the build arg LLVM_SH_URL (llvm.sh at a pinned llvm-project commit)}"
: "${LLVM_SH_SHA256:?set the build arg LLVM_SH_SHA256 (sha256 of that llvm.sh)}"
case " $TF_COPTS " in *march=native*) echo "refusing -march=native" >&2; exit 2 ;; esac
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends ca-certificates curl git gnupg lsb-release \
  patch python3-dev python3-venv software-properties-common unzip wget zip
curl -fsSL "$LLVM_SH_URL" -o /tmp/llvm.sh
echo "$LLVM_SH_SHA256  /tmp/llvm.sh" | sha256sum -c -
bash /tmp/llvm.sh "$LLVM_VERSION"
curl -fsSL -o /usr/local/bin/bazel \
  https://github.com/bazelbuild/bazelisk/releases/download/v1.25.0/bazelisk-linux-amd64
echo "$BAZELISK_SHA256  /usr/local/bin/bazel" | sha256sum -c -
chmod +x /usr/local/bin/bazel
git clone --depth 1 --branch "v$TF_VERSION" https://github.com/tensorflow/tensorflow /src/tf
cd /src/tf
py="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
# Non-interactive ./configure: no CUDA, clang from LLVM_VERSION, our copts.
export PYTHON_BIN_PATH="$(command -v python3)" TF_NEED_CUDA=0 TF_NEED_ROCM=0 \
  TF_NEED_CLANG=1 CLANG_COMPILER_PATH="/usr/lib/llvm-$LLVM_VERSION/bin/clang" \
  CC_OPT_FLAGS="$TF_COPTS" TF_SET_ANDROID_WORKSPACE=0
yes "" | ./configure
copts=()
for f in $TF_COPTS; do copts+=("--copt=$f"); done
bazel build //tensorflow/tools/pip_package:wheel \
  --config=opt "${copts[@]}" \
  --repo_env=WHEEL_NAME=tensorflow_cpu --repo_env=HERMETIC_PYTHON_VERSION="$py" \
  --jobs="$BAZEL_JOBS" --local_cpu_resources="$BAZEL_JOBS" --local_ram_resources="$BAZEL_RAM_MB"
mkdir -p /out
cp bazel-bin/tensorflow/tools/pip_package/wheel_house/tensorflow_cpu-*.whl /out/
bazel shutdown
