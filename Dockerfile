# mxbench images: `mxbench bench` (the bench part of mxbench) plus one Keras backend.
#
#   cpu   the stock TensorFlow CPU wheel (tensorflow-cpu: small, no CUDA)
#   gpu   TensorFlow with CUDA (tensorflow[and-cuda]); TF_VERSION=2.17.1 for Maxwell (CC 5.2)
#
# BACKEND=jax or BACKEND=torch builds the same targets with that framework instead of
# TensorFlow: cpu gets jax / PyTorch's CPU build (from PyTorch's index, or TORCH_CPU=a
# requirement plus FRAMEWORK_FIND_LINKS=where pip finds it), gpu gets jax[cuda12] / PyPI's
# CUDA torch. The TF_* arguments and tf-* labels then describe nothing that is installed.
#
# Normally built by `mxbench build` (content-hash tags, provenance labels, --ca-bundle);
# by hand:  docker build --target cpu -t mxbench-cpu .
# Offline:  --build-arg BASE_IMAGE=mxbench-base:bookworm (made by .ci/setup-docker.sh).
# Legacy-builder syntax only (docker-py cannot use BuildKit). The legacy builder runs
# every stage above the target, so the cpu chain comes first and costs a gpu build only
# one cached tensorflow-cpu layer; the cpu target never touches CUDA.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- a venv in /opt/venv, pip pointed at docker/ca-bundle.pem when given -------------
FROM ${BASE_IMAGE} AS venv
COPY docker/ /opt/mxbench-build/
RUN sh /opt/mxbench-build/venv.sh

# ---- cpu: TensorFlow + the bench's small deps, then mxbench without its orchestrator deps
FROM venv AS app-cpu
ARG TF_VERSION=2.21.0
ARG TF_PACKAGE=tensorflow-cpu
ARG BACKEND=tensorflow
ARG TORCH_CPU=""
ARG FRAMEWORK_FIND_LINKS=""
RUN sh /opt/mxbench-build/bench-deps.sh "${BACKEND}" cpu "${TF_PACKAGE}==${TF_VERSION}"
COPY pyproject.toml README.md* /src/
COPY runner/ /src/runner/
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps /src && /opt/venv/bin/mxbench --version

FROM ${BASE_IMAGE} AS cpu
ARG TF_VERSION=2.21.0
ARG TF_PACKAGE=tensorflow-cpu
ARG BACKEND=tensorflow
COPY --from=app-cpu /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
LABEL io.mxbench.target=cpu io.mxbench.backend=${BACKEND} io.mxbench.tf-version=${TF_VERSION} \
      io.mxbench.copts="" \
      io.mxbench.isa-claim="" io.mxbench.wheel-source="pypi ${TF_PACKAGE}==${TF_VERSION}"
ENTRYPOINT ["mxbench", "bench"]

# ---- gpu: TensorFlow with CUDA ---------------------------------------------------------
FROM venv AS app-gpu
ARG TF_VERSION=2.21.0
ARG BACKEND=tensorflow
ARG FRAMEWORK_FIND_LINKS=""
RUN sh /opt/mxbench-build/bench-deps.sh "${BACKEND}" gpu "tensorflow[and-cuda]==${TF_VERSION}"
COPY --from=app-cpu /src/ /src/
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps /src && /opt/venv/bin/mxbench --version

FROM ${BASE_IMAGE} AS gpu
ARG TF_VERSION=2.21.0
ARG BACKEND=tensorflow
COPY --from=app-gpu /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL io.mxbench.target=gpu io.mxbench.backend=${BACKEND} io.mxbench.tf-version=${TF_VERSION} \
      io.mxbench.copts="" \
      io.mxbench.isa-claim="" io.mxbench.wheel-source="pypi tensorflow[and-cuda]==${TF_VERSION}"
ENTRYPOINT ["mxbench", "bench"]
