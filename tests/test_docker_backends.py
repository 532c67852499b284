"""The image build takes the Keras backend as a build argument: the CPU variants for JAX and
PyTorch are built by ``mxbench build`` and run one tiny cell each through the docker engine.

PyPI's torch is the CUDA build (gigabytes); the CPU build comes from PyTorch's own index,
which this machine cannot reach, so the test serves the CPU wheel the venv was installed
from (``/opt/wheels``, or ``$MXBENCH_TORCH_CPU_WHEELS``) over HTTP on the Docker bridge and
names it with ``TORCH_CPU`` / ``FRAMEWORK_FIND_LINKS`` build arguments, as a user behind a
firewall would.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib.metadata
import importlib.util
import ipaddress
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import prebuild
from conftest import BASE_IMAGE, CA, docker_ok, mxbench, records, require_service
from mxbench import images
from mxbench.matrix.file import load_matrix

ROOT = Path(__file__).resolve().parents[1]
WHEELS = Path(os.environ.get("MXBENCH_TORCH_CPU_WHEELS", "/opt/wheels"))
TORCH = importlib.metadata.version("torch") if importlib.util.find_spec("torch") else ""

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@contextlib.contextmanager
def wheel_server() -> Iterator[str]:
    """WHEELS over HTTP where build containers reach the host (the docker0 bridge)."""
    import docker

    config = docker.from_env().networks.get("bridge").attrs["IPAM"]["Config"][0]
    gateway = config.get("Gateway") or str(ipaddress.ip_network(config["Subnet"])[1])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(WHEELS))
    server = http.server.ThreadingHTTPServer((gateway, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{gateway}:{server.server_address[1]}/"
    finally:
        server.shutdown()


def _matrix(ctx: Path, backend: str, build_args: str) -> Path:
    m = ctx / f"{backend}.yaml"
    m.write_text(f"""
version: 1
benchmark: {{image_size: 32, warmup_steps: 1, steps: 2, timeout_s: 300, repeats: 1}}
axes: {{policy: [float32], batch_size: [4], backend: [{backend}]}}
images:
  cpu-{backend}:
    dockerfile: Dockerfile
    target: cpu
    build_args: {{BASE_IMAGE: "{BASE_IMAGE}", BACKEND: {backend}{build_args}}}
hosts:
  - {{name: box, engine: docker, images: [cpu-{backend}]}}
""")
    return m


def build_backend(backend: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`mxbench build` of the cpu target with ``backend``, timed (torch's CPU wheel served
    to the build over HTTP for its duration)."""
    require_service(docker_ok(), f"a Docker engine with the base image {BASE_IMAGE}")
    extra = ""
    with contextlib.ExitStack() as stack:
        if backend == "torch":
            wheel = sorted(WHEELS.glob(f"torch-{TORCH}-*.whl"))
            require_service(bool(TORCH and wheel), f"a torch CPU wheel in {WHEELS}")
            url = stack.enter_context(wheel_server())
            extra = f', TORCH_CPU: "torch=={TORCH}", FRAMEWORK_FIND_LINKS: "{url}"'
        ctx = tmp_path_factory.mktemp(f"ctx-{backend}")
        images.ImageSpec(f"cpu-{backend}", ROOT, "Dockerfile", "cpu").snapshot(ctx)
        m = _matrix(ctx, backend, extra)
        t0 = time.monotonic()
        out = mxbench(
            "build", "--matrix", str(m), "--ca-bundle", CA, cwd=ctx, timeout=1500, env=prebuild.ENV
        )
        built_s = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    note = f"mxbench build (cpu-{backend} image): {built_s:.1f} s"
    return {"ctx": ctx, "matrix": m, "seconds": built_s, "note": note}


def _wants(backend: str, item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return (
        getattr(item, "originalname", "") == "test_cpu_image_of_another_backend_builds_and_runs"
        and callspec is not None
        and callspec.params.get("backend") == backend
    )


for _backend in ("jax", "torch"):
    prebuild.register(
        f"cpu-{_backend}",
        functools.partial(build_backend, _backend),
        functools.partial(_wants, _backend),
    )


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_cpu_image_of_another_backend_builds_and_runs(
    backend: str, request: pytest.FixtureRequest
) -> None:
    built = prebuild.result(request, f"cpu-{backend}")  # its build's error, if it failed
    ctx, m, built_s = built["ctx"], built["matrix"], built["seconds"]
    import docker

    tag = images.specs(load_matrix(m))[f"cpu-{backend}"].tag()
    image = docker.from_env().images.get(tag)
    assert image.labels["io.mxbench.backend"] == backend
    t0 = time.monotonic()
    out = mxbench("run", "--matrix", str(m), "--results", str(ctx / "results"), cwd=ctx)
    print(
        f"\n{backend} cpu image: build {built_s:.1f} s, {image.attrs['Size'] / 1e9:.2f} GB; "
        f"one cell {time.monotonic() - t0:.1f} s"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = records(ctx / "results")
    assert rec["status"] == "ok", rec.get("error")
    assert rec["params"]["backend"] == backend and rec["software"][backend]
    assert rec["software"]["tensorflow"] is None  # the image has only its own framework
    assert rec["device"]["framework"] == backend and rec["device"]["kind"] == "cpu"
