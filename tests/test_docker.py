"""The real `cpu` image through a real Docker engine: local socket and ssh://root@127.0.0.1.

One image is built per session (cached by its content hash). The build context is a
snapshot of the repository's context (what .dockerignore lets through) taken once, so the
tag `mxbench build` makes and the tag `mxbench run` looks for cannot drift while files in
the working tree change. Needs `.ci/setup-docker.sh` (dockerd, the offline base image,
sshd on loopback); skips locally without it, fails in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import require_service
from mxbench import images
from mxbench.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = os.environ.get("MXBENCH_BASE_IMAGE", "mxbench-base:bookworm")
CA = "/etc/ssl/certs/ca-certificates.crt"
SSH = "ssh://root@127.0.0.1"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _docker_ok() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        client.images.get(BASE_IMAGE)
        return True
    except Exception:
        return False


def _ssh_ok() -> bool:
    try:
        import docker

        docker.DockerClient(base_url=SSH, timeout=20, use_ssh_client=False).ping()
        return True
    except Exception:
        return False


def mxbench(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mxbench", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def matrix_text(hosts: str, *, build_args: str = "", timeout_s: float = 300) -> str:
    return f"""
version: 1
benchmark: {{image_size: 32, warmup_steps: 1, steps: 3, timeout_s: {timeout_s}}}
axes: {{policy: [float32], batch_size: [4]}}
images:
  cpu:
    dockerfile: Dockerfile
    target: cpu
    build_args: {{BASE_IMAGE: "{BASE_IMAGE}"{build_args}}}
hosts:
{hosts}
"""


def records(results: Path) -> list[dict]:
    out = []
    for f in sorted(results.glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


@pytest.fixture(scope="session")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A frozen copy of the build context (and the matrix's home)."""
    require_service(_docker_ok(), f"a Docker engine with the base image {BASE_IMAGE}")
    dest = tmp_path_factory.mktemp("ctx")
    images.ImageSpec("cpu", ROOT, "Dockerfile", "cpu").snapshot(dest)
    return dest


@pytest.fixture(scope="session")
def built(ctx: Path) -> dict:
    """`mxbench build` of the cpu image on the local socket, timed."""
    m = ctx / "build.yaml"
    m.write_text(matrix_text("  - {name: box, engine: docker, images: [cpu]}"))
    t0 = time.monotonic()
    out = mxbench("build", "--matrix", str(m), "--ca-bundle", CA, cwd=ctx)
    seconds = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    tag = images.specs(load_matrix(m))["cpu"].tag()
    state = "reused" if "reused" in out.stdout else "built"
    print(f"\nmxbench build (cpu image): {seconds:.1f} s ({state})")
    return {"matrix": m, "tag": tag, "stdout": out.stdout, "seconds": seconds}


def test_build_labels_the_image_with_provenance(built: dict) -> None:
    import docker

    image = docker.from_env().images.get(built["tag"])
    labels = image.labels
    assert labels["io.mxbench.image"] == "cpu"
    assert labels["io.mxbench.target"] == "cpu"
    assert labels["io.mxbench.tf-version"] == "2.21.0"
    assert labels["io.mxbench.wheel-source"] == "pypi tensorflow-cpu==2.21.0"
    assert labels["io.mxbench.isa-claim"] == ""
    assert labels["io.mxbench.content-hash"].startswith(built["tag"].split(":")[1])
    assert labels["io.mxbench.base-image"] == BASE_IMAGE
    assert image.attrs["Config"]["Entrypoint"] == ["mxbench", "bench"]


def test_second_build_reuses_the_image(built: dict, ctx: Path) -> None:
    t0 = time.monotonic()
    out = mxbench("build", "--matrix", str(built["matrix"]), cwd=ctx)
    assert out.returncode == 0, out.stderr
    assert "reused" in out.stdout and "built in" not in out.stdout
    assert time.monotonic() - t0 < 30


def test_run_end_to_end_local_socket_and_ssh(built: dict, ctx: Path, tmp_path: Path) -> None:
    import docker

    require_service(_ssh_ok(), f"sshd on loopback with docker reachable as {SSH}")
    m = ctx / "run.yaml"
    m.write_text(
        matrix_text(
            "  - {name: box, engine: docker, images: [cpu]}\n"
            f"  - {{name: box-ssh, engine: docker, docker_host: '{SSH}', images: [cpu]}}"
        )
    )
    results = tmp_path / "results"
    out = mxbench("run", "--matrix", str(m), "--results", str(results), cwd=ctx)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(results)
    assert sorted(r["host"] for r in recs) == ["box", "box-ssh"]
    image_id = docker.from_env().images.get(built["tag"]).id
    for r in recs:
        assert r["status"] == "ok", r.get("error")
        assert r["engine"] == "docker"
        assert r["image"]["name"] == "cpu" and r["image"]["id"] == image_id
        assert r["image"]["labels"]["io.mxbench.tf-version"] == "2.21.0"
        assert r["software"]["tensorflow"] == "2.21.0"
        assert r["params"]["batch_size"] == 4 and r["metrics"]["step_ms"]["n"] == 3
        assert r["metrics"]["step_ms"]["median"] > 0
        assert r["run"]["container"]
    assert {r["run"]["docker_host"] for r in recs} == {"the local Docker socket", SSH}
    left = docker.from_env().containers.list(all=True, filters={"label": "io.mxbench.cell"})
    assert left == []


def test_missing_image_is_an_error_naming_the_build_command(ctx: Path, tmp_path: Path) -> None:
    m = ctx / "missing.yaml"
    m.write_text(
        matrix_text("  - {name: box, engine: docker, images: [cpu]}", build_args=", X: never")
    )
    results = tmp_path / "results"
    out = mxbench("run", "--matrix", str(m), "--results", str(results), cwd=ctx)
    assert out.returncode == 1
    (rec,) = records(results)
    assert rec["status"] == "error"
    assert "never pulled" in rec["error"]
    assert f"mxbench build --matrix {m} --image cpu --host box" in rec["error"]


def test_gpu_host_without_nvidia_runtime_is_unsupported_others_continue(
    built: dict, ctx: Path, tmp_path: Path
) -> None:
    m = ctx / "gpu.yaml"
    m.write_text(
        matrix_text(
            "  - {name: gpu-box, engine: docker, gpus: all, images: [cpu]}\n"
            "  - {name: box, engine: docker, images: [cpu]}"
        )
    )
    results = tmp_path / "results"
    out = mxbench("run", "--matrix", str(m), "--results", str(results), cwd=ctx)
    assert out.returncode == 0, out.stderr[-3000:]
    by_host = {r["host"]: r for r in records(results)}
    assert by_host["gpu-box"]["status"] == "unsupported"
    assert "no NVIDIA runtime" in by_host["gpu-box"]["error"]
    assert by_host["box"]["status"] == "ok"


def test_cell_timeout_kills_and_removes_the_container(
    built: dict, ctx: Path, tmp_path: Path
) -> None:
    import docker

    m = ctx / "timeout.yaml"
    m.write_text(matrix_text("  - {name: box, engine: docker, images: [cpu]}", timeout_s=2))
    results = tmp_path / "results"
    t0 = time.monotonic()
    out = mxbench("run", "--matrix", str(m), "--results", str(results), cwd=ctx)
    assert out.returncode == 1
    assert time.monotonic() - t0 < 60
    (rec,) = records(results)
    assert rec["status"] == "timeout", rec
    left = docker.from_env().containers.list(all=True, filters={"label": "io.mxbench.cell"})
    assert left == []
