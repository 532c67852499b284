"""Faults of the store and of engines: two runs at once, symbolic links and FIFOs, a full
disk, a host name too long, an engine that fails in a way nobody planned for.

Real processes, a real tmpfs (when we may mount one) and the kernel's file size limit for
a full disk, a real HTTP server speaking for a Docker daemon that answers 500.
"""

from __future__ import annotations

import http.server
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mxbench.records.codec import decode
from mxbench.records.store import BadLine, ResultStore, StoreError, read_records

from test_faults import GOOD, fake_python, matrix, records, run, start, wait_for


def test_a_second_run_on_the_same_results_exits_2_naming_the_first(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    py = fake_python(
        tmp_path,
        f"""
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.05)
        print(json.dumps(GOOD))
        """,
    )
    m = matrix(tmp_path, ("h", py))
    first = start(tmp_path, m, tmp_path / "results", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lock = tmp_path / "results" / ".mxbench-run.lock"
        wait_for(lambda: lock.exists() and lock.read_text(), first)
        second = run(tmp_path, "-m", str(m))
        assert second.returncode == 2, second.stderr
        assert "in use by another mxbench run" in second.stderr
        assert f'"pid": {first.pid}' in second.stderr
        assert run(tmp_path, "-m", str(m), "--dry-run").returncode == 0  # reading is fine
    finally:
        gate.touch()
        _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert [r["status"] for r in records(tmp_path, "h")] == ["ok"]
    # The lock went with its process: the next run may go.
    assert run(tmp_path, "-m", str(m), "--resume").returncode == 0


def _record_line(host: str = "h") -> bytes:
    return json.dumps({**GOOD, "cell": "c1", "host": host}).encode() + b"\n"


def test_a_results_file_that_is_a_symlink_is_neither_written_nor_read(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(_record_line())
    results = tmp_path / "results"
    results.mkdir()
    (results / "h.jsonl").symlink_to(target)
    m = matrix(tmp_path, ("h", fake_python(tmp_path, "print(json.dumps(GOOD))")))
    res = run(tmp_path, "-m", str(m))
    assert res.returncode == 2 and "h.jsonl is a symbolic link" in res.stderr
    assert target.read_bytes() == _record_line()  # not appended to
    rec = decode(_record_line())
    with pytest.raises(StoreError, match="symbolic link"):
        ResultStore(results).append(rec)
    assert target.read_bytes() == _record_line()
    bad: list[BadLine] = []
    assert list(read_records(results / "h.jsonl", bad)) == []
    assert [b.reason for b in bad] == ["a symbolic link (not followed)"]
    rep = subprocess.run(
        [sys.executable, "-m", "mxbench", "report", "--results", str(results), "--csv"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in rep.stderr and "symbolic link" in rep.stderr


def test_a_fifo_or_a_link_to_a_device_never_blocks_a_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    for path, why in ((fifo, "not a regular file"), (tmp_path / "zero.jsonl", "symbolic link")):
        bad: list[BadLine] = []
        assert list(read_records(path, bad)) == []
        assert why in bad[0].reason


def test_an_over_long_line_is_one_bad_line_and_reading_goes_on(tmp_path: Path) -> None:
    from mxbench.records import store

    path = tmp_path / "h.jsonl"
    path.write_bytes(b"x" * (store.MAX_LINE_BYTES + 10) + b"\n" + _record_line())
    bad: list[BadLine] = []
    got = list(read_records(path, bad))
    assert [n for n, _ in got] == [2] and bad[0].lineno == 1 and "longer than" in bad[0].reason


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_lines_read_a_chunk_at_a_time_are_the_files_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Lines that span chunks, end exactly at a chunk's end, are blank, have no final newline
    or are longer than the bound (within a chunk and across chunks) come out as
    ``split(b"\\n")`` says, numbered as the file's lines."""
    import random

    from mxbench.records import store

    monkeypatch.setattr(store, "READ_CHUNK", chunk)
    monkeypatch.setattr(store, "MAX_LINE_BYTES", 10)
    rng = random.Random(chunk)
    path = tmp_path / "h.jsonl"
    for _ in range(200):
        pieces = [rng.choice([b"", b" ", b"a" * rng.randint(1, 14), b"{}\r"]) for _ in range(6)]
        data = b"\n".join(pieces) + rng.choice([b"", b"\n"])
        path.write_bytes(data)
        parts = data.split(b"\n")
        if parts[-1] == b"":
            parts.pop()  # the newline that ends the last line
        want = [(i, p) for i, p in enumerate(parts, 1) if p.strip() and len(p) <= 10]
        too_long = [i for i, p in enumerate(parts, 1) if len(p) > 10]
        bad: list[BadLine] = []
        assert list(store.read_lines(path, bad)) == want, data
        assert [b.lineno for b in bad] == too_long, data


def test_a_small_file_is_read_whole_to_its_bound_and_a_larger_one_is_left_to_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_small`` reads in pieces of the file's size as it was when opened: a file that
    grew since (its size said less) is still read to its end, or found too large."""
    from mxbench.records import store

    path = tmp_path / "h.jsonl"
    for size in (0, 1, 9, 10, 11, 25):
        path.write_bytes(b"x" * size)
        assert store.read_small(path, [], 10) == (b"x" * size if size <= 10 else None), size
    grown = os.fstat  # the file grows between its size being taken and its reading

    def stale(fd: int) -> os.stat_result:
        st = grown(fd)
        return os.stat_result((*st[:6], 3, *st[7:]))  # st_size: 3

    monkeypatch.setattr(store.os, "fstat", stale)
    for size, want in ((8, b"x" * 8), (10, b"x" * 10), (11, None)):
        path.write_bytes(b"x" * size)
        assert store.read_small(path, [], 10) == want, size
    bad: list[BadLine] = []
    assert store.read_small(tmp_path / "gone.jsonl", bad, 10) == b"" and len(bad) == 1


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
        capture_output=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _full_disk_run(tmp_path: Path, results: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    m = matrix(tmp_path, ("h", fake_python(tmp_path, "print(json.dumps(GOOD))")))
    return subprocess.run(
        [sys.executable, "-m", "mxbench", "run", "-m", str(m), "-r", str(results)],
        capture_output=True, text=True, timeout=120, check=False, **kw,  # type: ignore[call-overload]
    )  # fmt: skip


def _assert_one_clear_error(
    res: subprocess.CompletedProcess[str], before: bytes, after: bytes
) -> None:
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("mxbench: error:")]
    assert len(errors) == 1 and "is not saved (the file is as it was)" in errors[0], res.stderr
    assert after == before  # the torn tail was cut off


def test_a_full_disk_is_one_clear_error_and_no_torn_line(tmp_path: Path, tiny_tmpfs: Path) -> None:
    results = tiny_tmpfs / "results"
    results.mkdir()
    line = _record_line()  # padded to one whole page: the next record needs a new one
    line = line[:-2] + b', "source": "' + b"x" * (4096 - len(line) - 14) + b'"}\n'
    assert len(line) == 4096
    (results / "h.jsonl").write_bytes(line)
    before = (results / "h.jsonl").read_bytes()
    with open(tiny_tmpfs / "filler", "wb", buffering=0) as fh:  # fill the disk to the brim
        try:
            while fh.write(b"\0" * 512):
                pass
        except OSError:
            pass
    res = _full_disk_run(tmp_path, results)
    assert "No space left on device" in res.stderr
    _assert_one_clear_error(res, before, (results / "h.jsonl").read_bytes())


def test_the_file_size_limit_is_a_full_disk_too(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "h.jsonl").write_bytes(_record_line())
    before = (results / "h.jsonl").read_bytes()
    limit = len(before) + 200  # room for part of the next record: a torn line if not cut

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    res = _full_disk_run(tmp_path, results, preexec_fn=small_files)
    assert "File too large" in res.stderr
    _assert_one_clear_error(res, before, (results / "h.jsonl").read_bytes())


def test_a_host_name_too_long_for_a_file_name_is_a_matrix_error(tmp_path: Path) -> None:
    m = matrix(tmp_path, ("h" * 300, None))
    res = run(tmp_path, "-m", str(m))
    assert res.returncode == 2 and "at most 128 characters" in res.stderr, res.stderr


# ---------------------------------------------------------------- engines failing oddly


class _Daemon500(http.server.BaseHTTPRequestHandler):
    """A Docker daemon that answers its ping and fails everything else with HTTP 500."""

    def do_GET(self) -> None:
        if self.path.endswith("/_ping"):
            self._send(200, b"OK", "text/plain")
        elif self.path.endswith("/version"):
            self._send(200, json.dumps({"ApiVersion": "1.43", "Version": "24.0"}).encode())
        else:
            self._send(500, b'{"message": "injected: daemon broken"}')

    do_POST = do_HEAD = do_DELETE = do_GET

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def daemon500(tmp_path: Path) -> Iterator[Path]:
    """A matrix: a local host with a good bench, and a docker host whose daemon answers 500."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Daemon500)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    good = fake_python(tmp_path, "print(json.dumps(GOOD))")
    doc = json.loads(matrix(tmp_path, ("local", good)).read_text())
    doc["images"] = {"img": {"dockerfile": "Dockerfile"}}
    doc["hosts"].append(
        {"name": "broken", "engine": "docker", "images": ["img"],
         "docker_host": f"tcp://127.0.0.1:{server.server_port}"}
    )  # fmt: skip
    (tmp_path / "matrix.yaml").write_text(json.dumps(doc))
    try:
        yield tmp_path / "matrix.yaml"
    finally:
        server.shutdown()


def test_a_docker_daemon_answering_500_is_that_hosts_error_only(
    tmp_path: Path, daemon500: Path
) -> None:
    res = run(tmp_path, "-m", str(daemon500))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert [r["status"] for r in records(tmp_path, "local")] == ["ok"]
    (broken,) = records(tmp_path, "broken")
    assert broken["status"] == "error"
    assert "the docker engine failed" in broken["error"] and "injected" in broken["error"]


def test_build_on_a_daemon_answering_500_is_one_clear_error(
    tmp_path: Path, daemon500: Path
) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "mxbench", "build", "-m", str(daemon500)],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "host broken: building image 'img' failed: APIError" in res.stderr
    assert "injected" in res.stderr


def test_a_report_that_cannot_be_written_leaves_the_old_one_whole(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "h.jsonl").write_bytes(_record_line())
    out = tmp_path / "report.md"
    out.write_text("the old report\n")

    def report(**kw: object) -> subprocess.CompletedProcess[str]:
        argv = ["report", "--results", str(results), "--markdown", "--output", str(out)]
        return subprocess.run(
            [sys.executable, "-m", "mxbench", *argv],
            capture_output=True, text=True, timeout=120, check=False, **kw,  # type: ignore[call-overload]
        )  # fmt: skip

    def tiny_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))

    res = report(preexec_fn=tiny_files)
    assert res.returncode == 2 and "File too large (nothing written)" in res.stderr, res.stderr
    assert out.read_text() == "the old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "results"]  # no temp
    assert report().returncode == 0 and "## " in out.read_text()


def test_a_results_directory_is_never_part_of_an_image(tmp_path: Path) -> None:
    from mxbench.images import ImageSpec

    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY . /x\n")
    spec = ImageSpec("img", tmp_path, "Dockerfile")
    before = spec.content_hash()
    results = tmp_path / "results"
    ResultStore(results).check_writable(["h"])
    with ResultStore(results).lock():
        ResultStore(results).append(decode(_record_line()))
        (results / "sub").mkdir()
        (results / "sub" / "x.jsonl").write_bytes(_record_line())
        assert spec.content_hash() == before
        assert not any(f.startswith("results") for f in spec.files())
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "h.jsonl").write_bytes(_record_line())  # not a results directory
    assert spec.content_hash() != before


def test_an_unchanged_context_is_hashed_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mxbench import images

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY . /x\n")
    for i in range(20):
        (ctx / f"f{i}").write_bytes(os.urandom(1000))
    time.sleep(images.DigestCache.RACY_S + 0.1)  # older than the racy window
    read: list[str] = []
    real = images._file_digest
    monkeypatch.setattr(images, "_file_digest", lambda p: read.append(p.name) or real(p))
    spec = images.ImageSpec("img", ctx, "Dockerfile")
    first = spec.content_hash()
    assert len(read) == 21
    read.clear()
    assert spec.content_hash() == first and read == []  # all from the cache
    (ctx / "f3").write_bytes(b"changed")  # same name, new size and mtime
    changed = spec.content_hash()
    assert changed != first and read == ["f3"]
    read.clear()
    assert spec.content_hash() == changed and read == ["f3"]  # racy: read until it settles


def test_resume_warns_about_each_line_it_cannot_read(tmp_path: Path) -> None:
    """--resume reads the store: a line it cannot read (a torn one, a record of a newer shape)
    is one warning naming file:line and why, as in the report, not silently a cell to run
    again; the records it can read still count as done."""
    m = matrix(tmp_path, ("h", fake_python(tmp_path, "print(json.dumps(GOOD))")))
    assert run(tmp_path, "-m", str(m)).returncode == 0
    path = tmp_path / "results" / "h.jsonl"
    with path.open("a") as fh:
        fh.write('{"schema": "mxbench.result/2", "cell": "x", "host": "h", "status": "ok"\n')
    res = run(tmp_path, "-m", str(m), "--resume", "--dry-run")
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"{path}:2: not JSON" in warnings[0], res.stderr
    assert "1 cell(s) already done" in res.stdout
