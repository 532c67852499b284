"""The real `cpu` image through a real Docker engine: local socket and ssh://root@127.0.0.1.

One image is built per session (cached by its content hash). The build context is a
snapshot of the repository's context (what .dockerignore lets through) taken once, so the
tag `mxbench build` makes and the tag `mxbench run` looks for cannot drift while files in
the working tree change. Needs `.ci/setup-docker.sh` (dockerd, the offline base image,
sshd on loopback); skips locally without it, fails in CI.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import (
    BASE_IMAGE,
    SSH,
    matrix_text,
    mxbench,
    records,
    require_service,
    ssh_ok,
    stamped_by_docker,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


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


def pip_in(tag: str, *args: str) -> tuple[int, str]:
    """``pip *args`` in a container of the image ``tag``, without a network: its exit code
    and its output (stdout and stderr)."""
    import docker

    container = docker.from_env().containers.run(
        tag, list(args), entrypoint="/opt/venv/bin/pip", network_mode="none", detach=True
    )
    try:
        code = container.wait(timeout=120)["StatusCode"]
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


def test_pip_in_the_image_is_not_pointed_at_a_ca_bundle_it_lacks(built: dict) -> None:
    """``--ca-bundle`` configures pip in the build stages only: the bundle is not copied into
    the image, and neither is a pip config naming it, so pip in the image tries an index
    (here a closed port) rather than stopping for a file that is not there."""
    code, config = pip_in(built["tag"], "config", "list")
    assert code == 0 and "cert" not in config, config
    code, out = pip_in(
        built["tag"], "install", "--disable-pip-version-check", "--retries", "0",
        "--timeout", "2", "--index-url", "https://127.0.0.1:9/simple", "nothing-here",
    )  # fmt: skip
    assert "TLS CA certificate bundle" not in out, out
    assert code != 0 and "No matching distribution found for nothing-here" in out, out


def test_second_build_reuses_the_image(built: dict, ctx: Path) -> None:
    t0 = time.monotonic()
    out = mxbench("build", "--matrix", str(built["matrix"]), cwd=ctx)
    assert out.returncode == 0, out.stderr
    assert "reused" in out.stdout and "built in" not in out.stdout
    assert time.monotonic() - t0 < 30


def test_run_end_to_end_over_ssh(built: dict, ctx: Path, tmp_path: Path) -> None:
    """The same cell over ssh:// (the local socket's run is test_engine_contract's docker
    case, with the same provenance checks)."""
    import docker

    require_service(ssh_ok(), f"sshd on loopback with docker reachable as {SSH}")
    m = ctx / "run.yaml"
    m.write_text(
        matrix_text(f"  - {{name: box-ssh, engine: docker, docker_host: '{SSH}', images: [cpu]}}")
    )
    results = tmp_path / "results"
    out = mxbench("run", "--matrix", str(m), "--results", str(results), cwd=ctx)
    assert out.returncode == 0, out.stderr[-3000:]
    (r,) = records(results)
    assert r["host"] == "box-ssh" and r["status"] == "ok", r.get("error")
    stamped_by_docker(r, built["tag"], SSH)
    assert r["params"]["batch_size"] == 4 and r["metrics"]["step_ms"]["n"] == 3
    assert r["metrics"]["step_ms"]["median"] > 0
    left = docker.from_env().containers.list(
        all=True, sparse=True, filters={"label": "io.mxbench.cell"}
    )
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
