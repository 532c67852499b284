"""Images: specs from the matrix, content-hash tags, provenance labels, builds.

An image is named in the matrix (``images: {cpu: {dockerfile, target, context,
build_args}}``). Its tag is ``mxbench-<name>:<hash>``, where the hash covers everything
that decides what is inside: the Dockerfile, every file of the build context that
the ignore file lets through (``<Dockerfile>.dockerignore`` if there is one, else
``.dockerignore``), the target and the build arguments. So an unchanged image
is found and not rebuilt, and ``mxbench run`` finds exactly the image ``mxbench build``
made from the same checkout (and refuses a stale one) without a registry.

Builds go through the docker SDK (legacy builder), with the build log streamed to a
callback. ``--ca-bundle`` adds ``docker/ca-bundle.pem`` to the context; it is transport,
not content, so it is left out of the hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import re
import ssl
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec

from mxbench.errors import MxbenchError, UsageError
from mxbench.matrix.file import Image, Matrix
from mxbench.records.store import LOCK_NAME, write_atomic
from mxbench.version import __version__

LABEL = "io.mxbench."
CA_BUNDLE_PATH = "docker/ca-bundle.pem"  # where the Dockerfiles look for it (docker/venv.sh)
_HASH_SCHEME = "mxbench-image/1"
_ISA_FLAGS = {"-mavx2": "avx2", "-mfma": "fma", "-mavx512f": "avx512f", "-mavx": "avx"}


class BuildFailed(MxbenchError):
    """A build that ran and failed: names the failing step and ends with the log tail."""


@dataclass(frozen=True)
class ImageSpec:
    """One image of the matrix, resolved to absolute paths."""

    name: str
    context: Path
    dockerfile: str  # relative to the context, as the engine API wants it
    target: str | None = None
    build_args: Mapping[str, str] = field(default_factory=dict)

    @property
    def dockerfile_path(self) -> Path:
        return self.context / self.dockerfile

    @property
    def ignore_file(self) -> Path | None:
        """``<Dockerfile>.dockerignore`` next to the Dockerfile when there is one (BuildKit's
        rule: it replaces the context's), else the context's ``.dockerignore``."""
        own = self.dockerfile_path.with_name(self.dockerfile_path.name + ".dockerignore")
        if own.is_file():
            return own
        shared = self.context / ".dockerignore"
        return shared if shared.is_file() else None

    def files(self) -> list[str]:
        """Context files the daemon would see (the ignore file applied), sorted."""
        from docker.utils.build import exclude_paths

        ignore = self.ignore_file
        patterns = _dockerignore(ignore.read_text()) if ignore is not None else []
        found = []
        results = _ResultsDirs(self.context)
        for rel in exclude_paths(str(self.context), patterns, dockerfile=self.dockerfile):
            if results.holds(rel):
                continue  # measurements are not image content (they change as a run goes)
            found.append(rel)
            if len(found) > MAX_CONTEXT_FILES:
                raise UsageError(
                    f"images.{self.name}.context: {self.context} has more than "
                    f"{MAX_CONTEXT_FILES:,} files; narrow it with a .dockerignore"
                )
            mode = (self.context / rel).lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise UsageError(
                    f"images.{self.name}.context: {rel} is a FIFO, socket or device (never "
                    "read into a build); remove it or list it in .dockerignore"
                )
        return sorted(found)

    def content_hash(self) -> str:
        h = hashlib.sha256()

        def put(*parts: str | bytes) -> None:
            for p in parts:
                b = p.encode() if isinstance(p, str) else p
                h.update(len(b).to_bytes(8, "big") + b)

        put(_HASH_SCHEME, self.dockerfile, self.target or "")
        for k in sorted(self.build_args):
            put("arg", k, self.build_args[k])
        with DigestCache(self.context) as digests:
            for rel in self.files():
                path = self.context / rel
                st = path.lstat()
                if stat.S_ISLNK(st.st_mode):
                    put("link", rel, str(path.readlink()))
                elif stat.S_ISREG(st.st_mode):
                    put("file", rel, "x" if st.st_mode & 0o111 else "-", digests.get(rel, st))
        return h.hexdigest()

    def snapshot(self, dest: Path) -> ImageSpec:
        """The same spec over a frozen copy of its context (same files, same hash).

        For building while the working tree keeps changing: the tag `build` makes and the
        tag a later `run` looks for are then computed from the same bytes.
        """
        import shutil

        ignore = self.ignore_file
        extra = [str(ignore.relative_to(self.context))] if ignore is not None else []
        for rel in [*self.files(), *extra]:
            src = self.context / rel
            if src.is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / rel)
        return ImageSpec(self.name, dest, self.dockerfile, self.target, dict(self.build_args))

    def tag(self, content_hash: str | None = None) -> str:
        return f"mxbench-{self.name.lower()}:{(content_hash or self.content_hash())[:16]}"

    def arg(self, name: str) -> str | None:
        """A build argument's effective value: the matrix's, else the Dockerfile's default."""
        if name in self.build_args:
            return self.build_args[name]
        return dockerfile_arg_defaults(self.dockerfile_path.read_text()).get(name)


class _ResultsDirs:
    """Which paths of a context lie in an mxbench results directory (one that holds the
    lock file of ``mxbench run``): never part of an image, whatever the ignore file says."""

    def __init__(self, context: Path) -> None:
        self.context = context
        self._known: dict[str, bool] = {"": False}

    def holds(self, rel: str) -> bool:
        """``rel`` is a results directory, or lies in one."""
        return self._is_results(posixpath.dirname(rel)) or (
            (self.context / rel / LOCK_NAME).is_file()
        )

    def _is_results(self, folder: str) -> bool:
        if folder not in self._known:
            here = (self.context / folder / LOCK_NAME).is_file()
            self._known[folder] = here or self._is_results(posixpath.dirname(folder))
        return self._known[folder]


class DigestCache:
    """The sha256 of each context file, remembered between runs by (size, mtime, ctime,
    inode): a large unchanged context is hashed once, not before every ``run`` and
    ``doctor``. One file per context under ``$XDG_CACHE_HOME/mxbench/contexts/`` (written
    atomically; unreadable or unwritable means hashing everything, never an error). A file
    changed within :data:`RACY_S` of now is not remembered (its mtime may not show the
    next change: git's "racily clean" case)."""

    RACY_S = 2.0

    def __init__(self, context: Path) -> None:
        self.context = context
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        key = hashlib.sha256(str(context).encode()).hexdigest()[:24]
        self.path = base / "mxbench" / "contexts" / f"{key}.json"
        self.old: dict[str, tuple[int, int, int, int, str]] = {}
        self.new: dict[str, tuple[int, int, int, int, str]] = {}
        self.hashed = 0  # files read this time (the rest came from the cache)

    def __enter__(self) -> DigestCache:
        with contextlib.suppress(OSError, ValueError, msgspec.DecodeError):
            self.old = msgspec.json.decode(
                self.path.read_bytes(), type=dict[str, tuple[int, int, int, int, str]]
            )
        return self

    def get(self, rel: str, st: os.stat_result) -> bytes:
        stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        known = self.old.get(rel)
        if known is not None and known[:4] == stamp:
            digest = bytes.fromhex(known[4])
        else:
            digest = _file_digest(self.context / rel)
            self.hashed += 1
        if time.time() - max(st.st_mtime, st.st_ctime) > self.RACY_S:
            self.new[rel] = (*stamp, digest.hex())
        return digest

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None and self.new != self.old:
            with contextlib.suppress(OSError):
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(self.path, msgspec.json.encode(self.new))


def _file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.digest()


def _dockerignore(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.MULTILINE | re.IGNORECASE)


def dockerfile_arg_defaults(text: str) -> dict[str, str]:
    """``ARG NAME=default`` values (the first one wins, as the global ARG would)."""
    out: dict[str, str] = {}
    for name, value in _ARG.findall(text):
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out.setdefault(name, value)
    return out


# ------------------------------------------------------------------ from the matrix


def base_dirs(matrix: Matrix) -> list[Path]:
    """Where a relative image context is looked up: the matrix file's folder, then cwd."""
    dirs = [matrix.source.parent] if matrix.source else []
    cwd = Path.cwd().resolve()
    return dirs if cwd in dirs else [*dirs, cwd]


def resolve(name: str, image: Image | Mapping[str, Any], bases: Iterable[Path]) -> ImageSpec:
    """The spec of one image; the context is the first base where its Dockerfile exists."""
    img = image if isinstance(image, Image) else Image.model_validate(dict(image))
    tried: list[str] = []
    for base in bases:
        context = (base / img.context).resolve()
        dockerfile = (context / img.dockerfile).resolve()
        if dockerfile.is_file():
            for key, path in (("context", context), ("dockerfile", dockerfile)):
                if not img.allow_outside and not path.is_relative_to(base.resolve()):
                    raise UsageError(
                        f"images.{name}.{key}: {path} is outside {base.resolve()} (the "
                        f"matrix's folder); set images.{name}.allow_outside: true to allow it"
                    )
            return ImageSpec(name, context, img.dockerfile, img.target, dict(img.build_args))
        tried.append(str(context / img.dockerfile))
    raise UsageError(
        f"images.{name}: dockerfile {img.dockerfile!r} not found (looked for {', '.join(tried)})"
    )


def specs(matrix: Matrix, names: Iterable[str] | None = None) -> dict[str, ImageSpec]:
    wanted = list(names) if names else list(matrix.images)
    unknown = [n for n in wanted if n not in matrix.images]
    if unknown:
        known = ", ".join(sorted(matrix.images)) or "none defined"
        raise UsageError(f"--image {unknown[0]!r}: no such image in the matrix (images: {known})")
    bases = base_dirs(matrix)
    return {n: resolve(n, matrix.images[n], bases) for n in wanted}


# ------------------------------------------------------------------ provenance


def provenance_labels(spec: ImageSpec, content_hash: str) -> dict[str, str]:
    """Labels ``mxbench build`` puts on an image: what went in, and where from.

    Claims, not proofs: the bench's probe of TF's "not compiled for" list verifies
    ``isa-claim`` at run time, and the report flags an image whose claim fails.
    """
    labels = {
        "image": spec.name,
        "dockerfile": spec.dockerfile,
        "content-hash": content_hash,
        "version": __version__,
        "git-commit": git_commit(spec.context),
        "base-image": spec.arg("BASE_IMAGE") or "",
        "tf-version": spec.arg("TF_VERSION") or "",
    }
    if spec.target:
        labels["target"] = spec.target
    copts = spec.arg("TF_COPTS")
    if copts is not None:  # a source-built TensorFlow: the flags are the claim
        labels["copts"] = copts
        labels["isa-claim"] = ",".join(_ISA_FLAGS[f] for f in copts.split() if f in _ISA_FLAGS)
        wheel = spec.arg("TF_WHEEL")
        if wheel:
            labels["wheel-source"] = f"prebuilt wheels/{wheel}"
            path = spec.context / "wheels" / wheel
            if path.is_file():
                labels["wheel-sha256"] = _file_digest(path).hex()
        else:
            labels["wheel-source"] = f"source build v{labels['tf-version']}"
    # Stock wheels: the Dockerfile's own labels say where TF came from (no ISA claim).
    return {LABEL + k: v for k, v in labels.items()}


def git_commit(path: Path) -> str:
    """HEAD of the checkout holding ``path``, ``+dirty`` when it has local changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no", "."],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


# ------------------------------------------------------------------ building

LogFn = Callable[[str], None]


@dataclass
class Built:
    name: str
    tag: str
    id: str
    reused: bool
    seconds: float = 0.0


MAX_CONTEXT_FILES = 100_000
MAX_CA_BUNDLE_BYTES = 10 << 20


def read_ca_bundle(path: Path) -> str:
    """The PEM text of a CA bundle, checked (a regular file, not huge, certificates that
    OpenSSL loads); UsageError naming ``--ca-bundle`` otherwise. Never opens a FIFO."""
    where = f"--ca-bundle {path}"
    try:
        st = path.stat()
    except OSError as exc:
        raise UsageError(f"{where}: {exc.strerror.lower() if exc.strerror else exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{where}: not a regular file")
    if st.st_size > MAX_CA_BUNDLE_BYTES:
        raise UsageError(f"{where}: {st.st_size:,} bytes is too large for a CA bundle")
    try:
        pem = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: cannot read ({exc})") from None
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise UsageError(f"{where}: not a PEM certificate bundle (no BEGIN CERTIFICATE)")
    try:
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise UsageError(f"{where}: not a valid PEM certificate bundle ({exc})") from None
    return pem


def context_archive(spec: ImageSpec, ca_bundle: Path | None = None) -> IO[bytes]:
    """The build context as a tar stream (plus the CA bundle, when given), in a temporary
    file: sent to the daemon from disk, never held in memory."""
    from docker.utils.build import create_archive

    extra = []
    if ca_bundle is not None:
        extra.append((CA_BUNDLE_PATH, read_ca_bundle(ca_bundle)))
    buf = tempfile.TemporaryFile()  # noqa: SIM115 - the caller closes it
    fh = create_archive(str(spec.context), files=spec.files(), fileobj=buf, extra_files=extra)
    fh.seek(0)
    return fh  # type: ignore[no-any-return]


def find(client: Any, tag: str) -> Any | None:
    """The image with this tag on this daemon, or None (never pulls)."""
    import docker.errors

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def build(
    client: Any,
    spec: ImageSpec,
    *,
    where: str,
    ca_bundle: Path | None = None,
    log: LogFn = lambda line: None,
    step: LogFn = lambda line: None,
    rebuild: bool = False,
) -> Built:
    """Build ``spec`` on one daemon unless an image with its content tag is there already."""
    digest = spec.content_hash()
    tag = spec.tag(digest)
    existing = None if rebuild else find(client, tag)
    if existing is not None:
        return Built(spec.name, tag, existing.id, reused=True)
    t0 = time.monotonic()
    with context_archive(spec, ca_bundle) as archive:  # sent whole before the reply starts
        stream = client.api.build(
            fileobj=archive,
            custom_context=True,
            dockerfile=spec.dockerfile,
            target=spec.target,
            buildargs=dict(spec.build_args),
            labels=provenance_labels(spec, digest),
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
    lines: list[str] = []
    current = "(before the first step)"
    image_id = None
    for chunk in stream:
        if "error" in chunk:
            detail = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
            tail = "\n".join(lines[-15:])
            hint = _hint(detail + "\n" + tail)
            raise BuildFailed(
                f"building image {spec.name!r} ({tag}) on {where} failed at {current}: "
                f"{detail.strip()}{hint}\n--- build log tail ---\n{tail}"
            )
        if "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
        text = _ANSI.sub("", chunk.get("stream") or chunk.get("status") or "")
        for line in text.splitlines():
            if not line.strip():
                continue
            lines.append(line)
            del lines[:-200]
            if line.startswith("Step "):
                current = line.strip()
                step(current)
            log(line)
    image = find(client, tag)
    if image is None:
        raise BuildFailed(f"building image {spec.name!r} on {where}: no image tagged {tag}")
    return Built(spec.name, tag, image_id or image.id, False, time.monotonic() - t0)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _hint(detail: str) -> str:
    d = detail.lower()
    if "pull access denied" in d or "manifest unknown" in d or "lookup registry" in d:
        return (
            " (the base image cannot be pulled here: make one offline with "
            ".ci/setup-docker.sh and set build_args: {BASE_IMAGE: mxbench-base:bookworm})"
        )
    if "certificate verify failed" in d or "ssl" in d:
        return " (TLS to the package index failed: pass --ca-bundle PEM)"
    return ""
