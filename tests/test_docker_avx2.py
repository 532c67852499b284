"""The runtime half of Dockerfile.cpu-avx2, built from a given wheel through a real engine.

Building TensorFlow from source takes hours, so CI proves the other half: the image built
from a prebuilt wheel (``build_args: {TF_WHEEL: ...}``) by ``mxbench build``, its provenance
labels, one tiny cell run in it by the docker engine, and the report's verdict. The wheel is
the stock PyPI ``tensorflow-cpu`` of the venv's TF version (put in wheels/ by
``.ci/setup-docker.sh``), which is NOT compiled for AVX2/FMA: the bench's probe must say so
and the report must flag the image's ``io.mxbench.isa-claim=avx2,fma`` as failed.
"""

from __future__ import annotations

import importlib.metadata
import time
from pathlib import Path

import pytest

import prebuild
from conftest import BASE_IMAGE, CA, docker_ok, mxbench, records, require_service
from mxbench import images
from mxbench.matrix.file import load_matrix

ROOT = Path(__file__).resolve().parents[1]


def _venv_tf_version() -> str:
    """The venv's TF version, whichever distribution brought it (as .ci/setup-docker.sh)."""
    for dist in ("tensorflow", "tensorflow-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    raise RuntimeError("no TensorFlow distribution installed")


TF_VERSION = _venv_tf_version()
COPTS = "-mavx2 -mfma"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def stock_wheel() -> Path | None:
    found = sorted((ROOT / "wheels").glob(f"tensorflow_cpu-{TF_VERSION}-*.whl"))
    return found[0] if found else None


def build_avx2(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`mxbench build` of cpu-avx2 from the stock wheel, on a frozen copy of the context."""
    require_service(docker_ok(), f"a Docker engine with the base image {BASE_IMAGE}")
    wheel = stock_wheel()
    require_service(wheel is not None, f"wheels/tensorflow_cpu-{TF_VERSION}-*.whl (setup-docker)")
    assert wheel is not None
    ctx = tmp_path_factory.mktemp("ctx-avx2")
    images.ImageSpec("cpu-avx2", ROOT, "Dockerfile.cpu-avx2").snapshot(ctx)
    m = ctx / "avx2.yaml"
    m.write_text(f"""
version: 1
benchmark: {{image_size: 32, warmup_steps: 1, steps: 2, timeout_s: 300, repeats: 1}}
axes: {{policy: [float32], batch_size: [4]}}
images:
  cpu-avx2:
    dockerfile: Dockerfile.cpu-avx2
    build_args: {{BASE_IMAGE: "{BASE_IMAGE}", TF_WHEEL: "{wheel.name}", TF_VERSION: "{TF_VERSION}"}}
hosts:
  - {{name: box, engine: docker, images: [cpu-avx2]}}
""")
    t0 = time.monotonic()
    out = mxbench(
        "build", "--matrix", str(m), "--ca-bundle", CA, cwd=ctx, timeout=1500, env=prebuild.ENV
    )
    seconds = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    state = "reused" if "reused" in out.stdout else "built"
    note = f"mxbench build (cpu-avx2 from {wheel.name}): {seconds:.1f} s ({state})"
    tag = images.specs(load_matrix(m))["cpu-avx2"].tag()
    return {"ctx": ctx, "matrix": m, "tag": tag, "wheel": wheel, "note": note}


prebuild.register("cpu-avx2", build_avx2, prebuild.uses("avx2"))


@pytest.fixture(scope="session")
def avx2(request: pytest.FixtureRequest) -> dict:
    """cpu-avx2, built in the background since the session began (tests/prebuild.py)."""
    return prebuild.result(request, "cpu-avx2")


def test_labels_name_the_wheel_and_the_claim(avx2: dict) -> None:
    import docker

    image = docker.from_env().images.get(avx2["tag"])
    labels = image.labels
    assert labels["io.mxbench.image"] == "cpu-avx2"
    assert labels["io.mxbench.target"] == "cpu-avx2"
    assert labels["io.mxbench.tf-version"] == TF_VERSION
    assert labels["io.mxbench.wheel-source"] == f"prebuilt wheels/{avx2['wheel'].name}"
    assert labels["io.mxbench.wheel-sha256"] == images._file_digest(avx2["wheel"]).hex()
    assert labels["io.mxbench.isa-claim"] == "avx2,fma"
    assert labels["io.mxbench.copts"] == COPTS
    assert labels["io.mxbench.base-image"] == BASE_IMAGE
    assert image.attrs["Config"]["Entrypoint"] == ["mxbench", "bench"]


def test_stock_wheel_fails_the_claim_and_the_report_says_so(avx2: dict, tmp_path: Path) -> None:
    import docker

    results = tmp_path / "results"
    t0 = time.monotonic()
    out = mxbench(
        "run", "--matrix", str(avx2["matrix"]), "--results", str(results), cwd=avx2["ctx"]
    )
    print(f"\nmxbench run (1 cell in cpu-avx2): {time.monotonic() - t0:.1f} s")
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = records(results)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["engine"] == "docker" and rec["image"]["name"] == "cpu-avx2"
    assert rec["image"]["id"] == docker.from_env().images.get(avx2["tag"]).id
    labels = rec["image"]["labels"]
    assert labels["io.mxbench.isa-claim"] == "avx2,fma"
    assert labels["io.mxbench.copts"] == COPTS
    assert labels["io.mxbench.wheel-source"] == f"prebuilt wheels/{avx2['wheel'].name}"
    assert rec["software"]["tensorflow"] == TF_VERSION
    assert rec["metrics"]["step_ms"]["n"] == 2 and rec["metrics"]["step_ms"]["median"] > 0
    missing = {str(x).upper() for x in rec["cpu"]["tf_not_compiled_for"]}
    assert {"AVX2", "FMA"} <= missing, rec["cpu"]

    rep = mxbench("report", "--results", str(results), "--markdown", cwd=avx2["ctx"])
    assert rep.returncode == 0, rep.stderr[-3000:]
    text = " ".join(rep.stdout.split())
    assert (
        "Image claims AVX2/FMA (io.mxbench.isa-claim=avx2,fma) but TensorFlow's probe says it "
        "was not compiled for AVX2/FMA: the image does not contain the build it claims."
    ) in text, rep.stdout
    assert "TF binary: not compiled for AVX2/FMA" in text
    assert "AVX2/FMA compiled in" not in text
