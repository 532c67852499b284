#!/bin/sh
# Install the Keras backend's framework and the rest of what `mxbench bench` needs: the
# extra's small packages plus typer and rich. Never the orchestrator's dependencies
# (docker, pandas, ...): mxbench itself goes in with --no-deps.
#   $1 backend: tensorflow | jax | torch
#   $2 target:  cpu | gpu (which build of the framework)
#   $3 TensorFlow: a requirement or a wheel file (backend tensorflow only)
# FRAMEWORK_FIND_LINKS (optional): a URL or directory pip also looks in (e.g. where a
# PyTorch CPU wheel is served when download.pytorch.org cannot be reached).
set -eu
backend="$1"; target="$2"; tf="$3"
pip="/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check -q"
case "$backend" in
  tensorflow) framework="$tf"; dist=tensorflow ;;
  jax)
    if [ "$target" = gpu ]; then framework="jax[cuda12]"; else framework="jax"; fi
    dist=jax ;;
  torch)
    if [ "$target" = gpu ]; then framework="torch"; else framework="${TORCH_CPU:-torch}"; fi
    dist=torch ;;
  *) echo "bench-deps.sh: unknown backend '$backend' (tensorflow, jax or torch)" >&2; exit 2 ;;
esac
links=""
if [ -n "${FRAMEWORK_FIND_LINKS:-}" ]; then
  links="--find-links ${FRAMEWORK_FIND_LINKS}"
  case "$FRAMEWORK_FIND_LINKS" in
    # pip ignores a plain-HTTP location unless its host is trusted: the user named it.
    http://*) where="${FRAMEWORK_FIND_LINKS#http://}"; links="$links --trusted-host ${where%%/*}" ;;
  esac
fi
if [ "$backend" = torch ] && [ "$target" = cpu ] && [ -z "${TORCH_CPU:-}" ]; then
  # PyPI's torch is the CUDA build (gigabytes); the CPU build lives on PyTorch's index.
  links="$links --extra-index-url ${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
fi
# shellcheck disable=SC2086  # $links is a list of options
$pip $links "$framework" "msgspec>=0.18" "keras>=3.3" "psutil>=5.9" "nvidia-ml-py>=12" \
  "pillow>=10" "typer>=0.12" "rich>=13"
/opt/venv/bin/python - "$backend" <<'PY'
import importlib.metadata as md
import sys

names = {"tensorflow": ("tensorflow", "tensorflow-cpu", "tf-nightly"), "jax": ("jax",),
         "torch": ("torch",)}[sys.argv[1]]
for dist in names:
    try:
        print(f"installed {dist} {md.version(dist)}")
        break
    except md.PackageNotFoundError:
        pass
else:
    raise SystemExit(f"no {sys.argv[1]} distribution installed")
PY
