"""ssh:// Docker hosts go through the system's ssh client, as `docker -H ssh://` does, so what
~/.ssh/config says applies: here a host alias that only a ProxyJump (through the loopback
sshd) reaches, which the SDK's paramiko transport cannot follow."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mxbench.matrix.hosts import DockerHost

from conftest import require_service, ssh_ok
from mxbench.engines.docker import connect

ALIAS = "mxbench-behind-a-bastion"  # resolvable only through the ssh config below


@pytest.fixture
def ssh_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An `ssh` first on PATH that is the real one reading our config (ssh reads the user's
    own ~/.ssh/config from the password database's home, so a test cannot swap it)."""
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host {ALIAS}\n  HostName 127.0.0.1\n  User root\n  ProxyJump mxbench-bastion\n"
        "Host mxbench-bastion\n  HostName 127.0.0.1\n  User root\n"
        "Host *\n  BatchMode yes\n  ConnectTimeout 10\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    wrapper = bin_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec /usr/bin/ssh -F {config} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_an_ssh_host_reached_through_a_jump_host_of_the_ssh_config(ssh_config: Path) -> None:
    require_service(ssh_ok() and Path("/usr/bin/ssh").exists(), "sshd on loopback, ssh client")
    host = DockerHost(name="far", engine="docker", docker_host=f"ssh://{ALIAS}", images=["cpu"])
    client = connect(host, attempts=1)
    assert client.version()["Version"]
    calls = ssh_config.read_text()
    assert f"-- {ALIAS} docker system dial-stdio" in calls  # the system client, our alias
