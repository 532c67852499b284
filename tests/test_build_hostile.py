"""Hostile build inputs: a CA bundle that is not one, an image context outside the
matrix's folder, special files in a context. One line, exit 2, before any daemon is used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mxbench.matrix.file import Image

from mxbench.errors import UsageError
from mxbench.images import read_ca_bundle, resolve

SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mxbench", "build", *args],
                          capture_output=True, text=True, timeout=60, cwd=cwd)  # fmt: skip


def _garbage(tmp: Path) -> Path:
    (tmp / "ca.pem").write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n"
    )
    return tmp / "ca.pem"


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "ca.pem")
    return tmp / "ca.pem"


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda tmp: tmp, "not a regular file"),
        (_fifo, "not a regular file"),
        (
            lambda tmp: ((tmp / "ca.pem").write_text("") and tmp / "ca.pem") or tmp / "ca.pem",
            "not a PEM",
        ),
        (
            lambda tmp: (tmp / "ca.pem").write_bytes(b"\xff\x00\x01") and tmp / "ca.pem",
            "cannot read",
        ),
        (_garbage, "not a valid PEM certificate bundle"),
        (lambda tmp: tmp / "missing.pem", "no such file"),
    ],
)
def test_ca_bundle_is_checked_before_any_daemon(tmp_path: Path, make, needle: str) -> None:  # type: ignore[no-untyped-def]
    bundle = make(tmp_path)
    (tmp_path / "m.yaml").write_text(
        "hosts: [{name: d, engine: docker, docker_host: 'tcp://127.0.0.1:9', images: [x]}]\n"
        "images: {x: {}}\n"
    )
    proc = _cli("-m", "m.yaml", "--ca-bundle", str(bundle), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"--ca-bundle {bundle}" in proc.stderr and needle.lower() in proc.stderr.lower()
    assert "Traceback" not in proc.stderr and "Docker daemon" not in proc.stderr


@pytest.mark.skipif(not SYSTEM_CA.is_file(), reason="no system CA bundle")
def test_a_real_ca_bundle_passes() -> None:
    assert "BEGIN CERTIFICATE" in read_ca_bundle(SYSTEM_CA)


def _project(tmp: Path) -> Path:
    (tmp / "proj" / "ctx").mkdir(parents=True)
    (tmp / "proj" / "ctx" / "Dockerfile").write_text("FROM scratch\n")
    (tmp / "elsewhere").mkdir()
    (tmp / "elsewhere" / "Dockerfile").write_text("FROM scratch\n")
    return tmp / "proj"


@pytest.mark.parametrize(
    ("image", "key"),
    [
        ({"context": "../elsewhere"}, "context"),
        ({"context": "/"}, "context"),
        ({"context": "ctx", "dockerfile": "../../elsewhere/Dockerfile"}, "dockerfile"),
        ({"context": "link"}, "context"),
    ],
)
def test_context_outside_the_matrix_folder_is_refused(
    tmp_path: Path, image: dict, key: str
) -> None:
    base = _project(tmp_path)
    (base / "link").symlink_to(tmp_path / "elsewhere")
    if image["context"] == "/":
        (tmp_path / "elsewhere").rename(tmp_path / "elsewhere2")
        image = {"context": str(tmp_path / "elsewhere2")}
    with pytest.raises(UsageError, match=rf"images\.x\.{key}: .* is outside"):
        resolve("x", Image(**image), [base])
    spec = resolve("x", Image(**image, allow_outside=True), [base])  # the user's opt-in
    assert spec.dockerfile_path.is_file()


def test_special_files_in_a_context_are_refused_not_read(tmp_path: Path) -> None:
    base = _project(tmp_path)
    ctx = base / "ctx"
    os.mkfifo(ctx / "pipe")  # reading it into a tar would block forever
    (ctx / "loop").symlink_to(ctx / "loop")
    (ctx / "proc").symlink_to("/proc")
    spec = resolve("x", Image(context="ctx"), [base])
    with pytest.raises(UsageError, match="pipe is a FIFO, socket or device"):
        spec.files()
    (ctx / ".dockerignore").write_text("pipe\n")
    assert "pipe" not in spec.files() and {"loop", "proc"} <= set(spec.files())
    spec.content_hash()  # symlinks hashed as links: no loop followed, /proc not walked
