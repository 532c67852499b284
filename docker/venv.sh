#!/bin/sh
# Make /opt/venv (the image's only Python environment) and point pip at a CA bundle when
# `mxbench build --ca-bundle PEM` put one at docker/ca-bundle.pem in the build context
# (pip behind a TLS-inspecting proxy). The bundle stays in the builder stage only, and so
# does the pip config that names it: /etc/pip.conf, outside the /opt/venv that the final
# stage copies (a /opt/venv/pip.conf went with it and named a bundle the image lacks, so
# every `pip install` from an index in a built image failed: "Could not find a suitable
# TLS CA certificate bundle, invalid path: /opt/mxbench-build/ca-bundle.pem").
set -eu
python3 -m venv /opt/venv
if [ -s /opt/mxbench-build/ca-bundle.pem ]; then
  printf '[global]\ncert = /opt/mxbench-build/ca-bundle.pem\n' >/etc/pip.conf
fi
/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check -q --upgrade pip setuptools wheel
