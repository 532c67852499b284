#!/bin/sh
# Make /opt/venv (the image's only Python environment) and point pip at a CA bundle when
# `mxbench build --ca-bundle PEM` put one at docker/ca-bundle.pem in the build context
# (pip behind a TLS-inspecting proxy). The bundle stays in the builder stage only.
set -eu
python3 -m venv /opt/venv
if [ -s /opt/mxbench-build/ca-bundle.pem ]; then
  printf '[global]\ncert = /opt/mxbench-build/ca-bundle.pem\n' >/opt/venv/pip.conf
fi
/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check -q --upgrade pip setuptools wheel
