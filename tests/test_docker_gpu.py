"""The GPU image really built, and run where there is no GPU.

``mxbench build`` builds the Dockerfile's ``gpu`` target (TensorFlow with CUDA, the
``tensorflow[and-cuda]`` wheels) once on the local engine; one tiny cell then runs in it on
this GPU-less host through the docker engine, as a user who forgot ``gpus: all`` would. The
record must say that no GPU was visible and that TensorFlow ran on the CPU, and the report's
silent-fallback rule must say so in a real container, not only in a unit test.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import prebuild
from conftest import BASE_IMAGE, CA, docker_ok, mxbench, records, require_service
from mxbench import images
from mxbench.matrix.file import load_matrix

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def build_gpu(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`mxbench build` of the gpu target on a frozen copy of the context, timed and sized."""
    require_service(docker_ok(), f"a Docker engine with the base image {BASE_IMAGE}")
    import docker

    ctx = tmp_path_factory.mktemp("ctx-gpu")
    images.ImageSpec("gpu", ROOT, "Dockerfile", "gpu").snapshot(ctx)
    m = ctx / "gpu.yaml"
    m.write_text(f"""
version: 1
benchmark: {{image_size: 32, warmup_steps: 1, steps: 2, timeout_s: 300, repeats: 1}}
axes: {{policy: [float32], batch_size: [4]}}
images:
  gpu:
    dockerfile: Dockerfile
    target: gpu
    build_args: {{BASE_IMAGE: "{BASE_IMAGE}"}}
hosts:
  - {{name: nogpu, engine: docker, images: [gpu]}}
""")
    t0 = time.monotonic()
    out = mxbench(
        "build", "--matrix", str(m), "--ca-bundle", CA, cwd=ctx, timeout=2400, env=prebuild.ENV
    )
    seconds = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    tag = images.specs(load_matrix(m))["gpu"].tag()
    size = docker.from_env().images.get(tag).attrs["Size"]
    state = "reused" if "reused" in out.stdout else "built"
    note = f"mxbench build (gpu image): {seconds:.1f} s ({state}), {size / 1e9:.2f} GB"
    return {"ctx": ctx, "matrix": m, "tag": tag, "note": note}


prebuild.register("gpu", build_gpu, prebuild.uses("gpu_image"))


@pytest.fixture(scope="session")
def gpu_image(request: pytest.FixtureRequest) -> dict:
    """The gpu image, built in the background since the session began (tests/prebuild.py)."""
    return prebuild.result(request, "gpu")


def test_gpu_image_is_tensorflow_with_cuda(gpu_image: dict) -> None:
    import docker

    image = docker.from_env().images.get(gpu_image["tag"])
    assert image.labels["io.mxbench.target"] == "gpu"
    assert "tensorflow[and-cuda]" in image.labels["io.mxbench.wheel-source"]
    env = dict(e.split("=", 1) for e in image.attrs["Config"]["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_gpu_image_without_a_gpu_runs_on_the_cpu_and_the_report_says_so(
    gpu_image: dict, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    t0 = time.monotonic()
    out = mxbench(
        "run", "--matrix", str(gpu_image["matrix"]), "--results", str(results),
        cwd=gpu_image["ctx"],
    )  # fmt: skip
    print(f"\nmxbench run (1 cell in the gpu image, no GPU): {time.monotonic() - t0:.1f} s")
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = records(results)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["image"]["labels"]["io.mxbench.target"] == "gpu"
    sw = rec["software"]
    assert sw["is_cuda_build"] is True and sw["cuda"], sw  # TF built with CUDA ...
    dev = rec["device"]
    assert dev["kind"] == "cpu" and dev["present_gpus"] == [], dev  # ... and no GPU seen
    assert dev["framework"] == "tensorflow" and dev["compute_capability"] is None
    assert rec["metrics"]["gpu_util_pct"] is None and rec["metrics"]["peak_memory_kind"] == "rss"

    rep = mxbench("report", "--results", str(results), "--markdown", cwd=gpu_image["ctx"])
    assert rep.returncode == 0, rep.stderr[-3000:]
    text = " ".join(rep.stdout.split())
    assert (
        "Silent CPU fallback: image gpu is the GPU build, but no GPU was visible in it "
        "(NVML found no driver, TensorFlow no device), so TensorFlow ran on the CPU"
    ) in text, rep.stdout
