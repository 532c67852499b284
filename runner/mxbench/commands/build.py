"""``mxbench build``: build the images the matrix names, on the docker hosts that use them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from mxbench.errors import MxbenchError, UsageError


def build(
    matrix: Path = typer.Option(
        Path("matrix.yaml"), "--matrix", "-m", help="Matrix file (schema v1)."
    ),
    image: list[str] = typer.Option(
        [], "--image", "-i", help="Build only this image (repeatable).", show_default=False
    ),
    host: list[str] = typer.Option(
        [], "--host", "-H", help="Build only on this host (repeatable).", show_default=False
    ),
    ca_bundle: Path | None = typer.Option(
        None,
        "--ca-bundle",
        envvar="MXBENCH_CA_BUNDLE",
        help="PEM bundle copied into the build so pip trusts a TLS-inspecting proxy "
        "(e.g. /etc/ssl/certs/ca-certificates.crt).",
        show_default=False,
    ),
    rebuild: bool = typer.Option(
        False, "--rebuild", help="Build even when an image with the same content tag exists."
    ),
) -> None:
    """Build each image the matrix names on each docker host that uses it.

    Images are tagged `mxbench-<name>:<content hash>` (Dockerfile, context, target, build
    arguments), so an unchanged image is found and not rebuilt, and `mxbench run` uses
    exactly this build. The build log streams under a progress display. Exit code 0 when
    every image is there, 1 when a build failed or a daemon is unreachable, 2 for bad usage.

    Examples:

    ```
    mxbench build -m matrix.yaml
    mxbench build -m matrix.yaml --image cpu --host cpu-box \\
        --ca-bundle /etc/ssl/certs/ca-certificates.crt
    ```
    """
    from mxbench.images import read_ca_bundle
    from mxbench.matrix.file import load_matrix

    if ca_bundle is not None:
        read_ca_bundle(ca_bundle)  # before any daemon is contacted
    m = load_matrix(matrix)
    plan = _plan(m, host, image)
    if not plan:
        typer.echo("mxbench build: no docker host in the matrix uses an image; nothing to build")
        return
    _build_all(m, plan, ca_bundle, rebuild)


def _plan(m: Any, hosts: list[str], wanted: list[str]) -> list[tuple[Any, list[str]]]:
    """(docker host, image names) pairs to build, in matrix order."""
    from mxbench import images

    names = [h.name for h in m.hosts]
    for h in hosts:
        if h not in names:
            known = ", ".join(names)
            raise UsageError(f"--host {h!r}: no such host in the matrix (hosts: {known})")
        if not m.host(h).needs_build:
            raise UsageError(f"--host {h!r}: engine {m.host(h).engine_name}, no images to build")
    images.specs(m, wanted)  # validates --image names and resolves every Dockerfile early
    plan = []
    for h in m.hosts:
        if not h.needs_build or (hosts and h.name not in hosts):
            continue
        todo = [i for i in h.image_names() if not wanted or i in wanted]
        if todo:
            plan.append((h, todo))
    used = {i for _, todo in plan for i in todo}
    unused = [i for i in wanted if i not in used]
    if unused:
        raise UsageError(f"--image {unused[0]!r}: no selected docker host uses it")
    return plan


def _build_all(m: Any, plan: list[tuple[Any, list[str]]], ca: Path | None, rebuild: bool) -> None:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from mxbench import images
    from mxbench.engines.docker import DockerUnreachable, address, connect
    from mxbench.progress import plain

    console = Console(stderr=True)
    specs = images.specs(m, {i for _, todo in plan for i in todo})
    rows: list[tuple[str, str, str, str, str]] = []
    failures: list[str] = []
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.fields[what]}"),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with progress:
        for h, todo in plan:
            try:
                client = connect(h)
            except DockerUnreachable as exc:
                failures.append(str(exc))
                continue
            for name in todo:
                what = f"{h.name}/{name}"
                task = progress.add_task("checking", what=what)

                def log(line: str, what: str = what) -> None:
                    console.print(plain(f"  {what} | {line}", style="dim"), highlight=False)

                def step(line: str, task: Any = task) -> None:
                    progress.update(task, description=line[:100])

                try:
                    built = images.build(
                        client,
                        specs[name],
                        where=f"host {h.name} ({address(h)})",
                        ca_bundle=ca,
                        log=log,
                        step=step,
                        rebuild=rebuild,
                    )
                except Exception as exc:  # a daemon answering 500, a cut link: this image only
                    failures.append(
                        str(exc)
                        if isinstance(exc, MxbenchError)
                        else f"host {h.name}: building image {name!r} failed: "
                        f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                    )
                    rows.append((h.name, name, specs[name].tag(), "-", "FAILED"))
                    continue
                finally:
                    progress.remove_task(task)
                state = "reused" if built.reused else f"built in {built.seconds:.0f} s"
                console.print(f"{what}: {built.tag} {built.id[:19]} ({state})", highlight=False)
                rows.append((h.name, name, built.tag, built.id[:19], state))
    table = Table("host", "image", "tag", "id", "result", title="mxbench build")
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    if failures:
        for f in failures[:-1]:
            console.print(plain(f"mxbench: error: {f}", style="red"), highlight=False)
        raise MxbenchError(failures[-1])
