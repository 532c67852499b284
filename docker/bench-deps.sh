#!/bin/sh
# Install TensorFlow ($1: a requirement or a wheel file) and the rest of what
# `mxbench bench` needs: the [tf] extra's packages plus typer and rich. Never the
# orchestrator's dependencies (docker, pandas, ...): mxbench itself goes in with --no-deps.
set -eu
tf="$1"
pip="/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check -q"
$pip "$tf" "msgspec>=0.18" "keras>=3.3" "psutil>=5.9" "nvidia-ml-py>=12" "typer>=0.12" "rich>=13"
/opt/venv/bin/python - <<'PY'
import importlib.metadata as md
for dist in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
    try:
        print(f"installed {dist} {md.version(dist)}")
        break
    except md.PackageNotFoundError:
        pass
else:
    raise SystemExit("no TensorFlow distribution installed")
PY
