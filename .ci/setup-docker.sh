#!/usr/bin/env bash
# Start a real Docker engine (overlay2) and sshd on loopback for the docker tests.
#
# Idempotent: every step checks first and does nothing when already done, so `.ci/run`
# may call it on every run. Nothing is pulled (there is no registry here): the base image
# is made once with debootstrap from the Debian mirror and `docker import`ed as
# mxbench-base:bookworm. sshd listens on 127.0.0.1 only and accepts only a key made here,
# so `docker_host: ssh://root@127.0.0.1` works for docker[ssh] (paramiko) and the CLI.
# Nothing is written outside this machine. Logs: .ci/state/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="$ROOT/.ci/state"
BASE_IMAGE="${MXBENCH_BASE_IMAGE:-mxbench-base:bookworm}"
SSH_PORT="${MXBENCH_SSH_PORT:-22}"
mkdir -p "$STATE"
say() { printf '[setup-docker] %s\n' "$*"; }
t0=$SECONDS

# 1. packages ------------------------------------------------------------------------
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >"$STATE/apt.log" 2>&1
fi

# 2. dockerd (overlay2) ----------------------------------------------------------------
if docker info >/dev/null 2>&1; then
  say "dockerd already running ($(docker info --format '{{.Driver}}'))"
else
  say "starting dockerd (overlay2)"
  # A machine restarted without a clean shutdown keeps dockerd's pid file; dockerd then
  # refuses to start. Remove it only when the pid it names is not running.
  for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
    if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      say "removing stale $pidfile"
      rm -f "$pidfile"
    fi
  done
  # setsid: survive the shell that started it; the log stays for post-mortems.
  setsid dockerd --storage-driver=overlay2 --host=unix:///var/run/docker.sock \
    >"$STATE/dockerd.log" 2>&1 </dev/null &
  echo $! >"$STATE/dockerd.pid"
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    say "dockerd did not come up; log tail:"
    tail -n 30 "$STATE/dockerd.log" >&2
    exit 1
  fi
  driver="$(docker info --format '{{.Driver}}')"
  [ "$driver" = overlay2 ] || { say "dockerd uses $driver, not overlay2"; exit 1; }
  say "dockerd up (overlay2)"
fi

# 3. base image ------------------------------------------------------------------------
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  say "base image $BASE_IMAGE present"
else
  say "making $BASE_IMAGE with debootstrap (minbase, bookworm)"
  rootfs="$(mktemp -d /tmp/mxbench-rootfs.XXXXXX)"
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$rootfs" "${MXBENCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
    >"$STATE/debootstrap.log" 2>&1 || { tail -n 30 "$STATE/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  say "base image $BASE_IMAGE made"
fi

# 4. sshd on loopback with a root key ----------------------------------------------------
key="$HOME/.ssh/id_ed25519"
mkdir -p "$HOME/.ssh" && chmod 700 "$HOME/.ssh"
[ -f "$key" ] || ssh-keygen -q -t ed25519 -N '' -C mxbench-ci -f "$key"
touch "$HOME/.ssh/authorized_keys" && chmod 600 "$HOME/.ssh/authorized_keys"
grep -qF "$(cat "$key.pub")" "$HOME/.ssh/authorized_keys" || cat "$key.pub" >>"$HOME/.ssh/authorized_keys"
[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A
mkdir -p /run/sshd
conf="$STATE/sshd_config"
cat >"$conf" <<CONF
ListenAddress 127.0.0.1
Port $SSH_PORT
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
UsePAM no
PidFile $STATE/sshd.pid
SetEnv PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CONF
ssh_ok() {
  ssh -p "$SSH_PORT" -i "$key" -o BatchMode=yes -o ConnectTimeout=5 root@127.0.0.1 true 2>/dev/null
}
known="$HOME/.ssh/known_hosts"
if ! ssh_ok; then
  if [ -f "$STATE/sshd.pid" ] && kill -0 "$(cat "$STATE/sshd.pid")" 2>/dev/null; then
    kill "$(cat "$STATE/sshd.pid")" && sleep 1
  fi
  /usr/sbin/sshd -f "$conf" -E "$STATE/sshd.log"
fi
# paramiko (docker[ssh]) rejects unknown host keys: record ours.
hostspec="127.0.0.1"
[ "$SSH_PORT" = 22 ] || hostspec="[127.0.0.1]:$SSH_PORT"
for _ in $(seq 1 20); do
  scanned="$(ssh-keyscan -p "$SSH_PORT" -t ed25519 127.0.0.1 2>/dev/null || true)"
  [ -n "$scanned" ] && break
  sleep 0.5
done
touch "$known"
grep -qF "$scanned" "$known" 2>/dev/null || { ssh-keygen -R "$hostspec" -f "$known" >/dev/null 2>&1 || true; echo "$scanned" >>"$known"; }
ssh_ok || { say "ssh root@127.0.0.1 fails; log:"; tail -n 20 "$STATE/sshd.log" >&2; exit 1; }
ssh -p "$SSH_PORT" -o BatchMode=yes root@127.0.0.1 docker version --format '{{.Server.Version}}' >/dev/null \
  || { say "docker over ssh://root@127.0.0.1 fails"; exit 1; }
say "sshd on 127.0.0.1:$SSH_PORT; docker reachable over ssh://root@127.0.0.1"

# 5. a stock TensorFlow CPU wheel in wheels/ (for tests/test_docker_avx2.py) ----------------
# Dockerfile.cpu-avx2 installs a prebuilt wheel from the build context's wheels/ (git-ignored).
# The stock PyPI wheel of the venv's TF version is NOT compiled for AVX2/FMA: building the
# image from it must make the report flag the image's isa-claim as failed.
# The TF version the venv has, whichever distribution brought it (tensorflow or tensorflow-cpu).
tf_version="$("$ROOT/.venv/bin/python" -c '
import importlib.metadata as m
for dist in ("tensorflow", "tensorflow-cpu"):
    try:
        print(m.version(dist))
        break
    except m.PackageNotFoundError:
        pass
')"
[ -n "$tf_version" ] || { say "no TensorFlow in .venv (run .ci/setup first)"; exit 1; }
if compgen -G "$ROOT/wheels/tensorflow_cpu-${tf_version}-*.whl" >/dev/null; then
  say "wheel tensorflow-cpu==$tf_version present in wheels/"
else
  say "downloading wheel tensorflow-cpu==$tf_version into wheels/"
  "$ROOT/.venv/bin/pip" download -q --no-deps --only-binary=:all: -d "$ROOT/wheels" \
    "tensorflow-cpu==$tf_version" >"$STATE/wheel.log" 2>&1 || { tail -n 20 "$STATE/wheel.log" >&2; exit 1; }
fi
say "done in $((SECONDS - t0)) s"
