#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for the slurm engine's tests.
#
# Idempotent: installs slurm-wlm + munge if missing, creates a munge key if there is none,
# writes /etc/slurm/slurm.conf for this host (its real CPU count and memory, from
# `slurmd -C`), starts munged, slurmctld and slurmd in the background if they are not
# running, and waits until `sinfo` shows the node idle. Re-running on a working cluster
# changes nothing; a changed slurm.conf restarts the daemons.
#
# No cgroups (CI containers rarely delegate them): proctrack/linuxproc, task/none, and
# memory limits enforced by jobacct_gather (OverMemoryKill). Time limits are enforced with
# OverTimeLimit=0 and a short KillWait so that a timed-out job ends promptly.
# No slurmdbd: there is no accounting database here, so the engine reads job states from
# `scontrol show job` (kept MinJobAge seconds after a job ends) and its own output files.
set -euo pipefail

SLURM_DIR=/etc/slurm
CONF=$SLURM_DIR/slurm.conf
LOG_DIR=/var/log/slurm
SPOOL_CTLD=/var/spool/slurmctld
SPOOL_D=/var/spool/slurmd
PARTITION=${MXBENCH_SLURM_PARTITION:-debug}
WAIT_S=${MXBENCH_SLURM_WAIT_S:-60}

log() { echo "setup-slurm: $*" >&2; }

# --------------------------------------------------------------------------- packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    log "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# --------------------------------------------------------------------------- munge
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating a munge key"
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    kill_pidfile() { [[ -f $1 ]] && kill "$(cat "$1")" 2>/dev/null || true; }
    kill_pidfile /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.1
    done
    munge -n | unmunge >/dev/null || { log "munged does not answer"; exit 1; }
fi

# --------------------------------------------------------------------------- slurm.conf
HOST=$(hostname -s)
# NodeName=... CPUs=... RealMemory=... as slurmd itself detects them (no guessing).
NODE_LINE=$(slurmd -C | head -n 1)
CPUS=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$NODE_LINE")
REAL_MEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$NODE_LINE")
# Leave a little memory to the OS so that slurmd does not drain the node as "low memory".
MEM=$((REAL_MEM * 95 / 100))
DEF_MEM_PER_CPU=$((MEM / CPUS))

install -d -m 0755 "$SLURM_DIR" "$LOG_DIR" "$SPOOL_CTLD" "$SPOOL_D"
NEW_CONF=$(mktemp)
cat >"$NEW_CONF" <<EOF
# Written by mxbench .ci/setup-slurm.sh: a one-node cluster on $HOST for tests.
ClusterName=mxbench
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
StateSaveLocation=$SPOOL_CTLD
SlurmdSpoolDir=$SPOOL_D
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$DEF_MEM_PER_CPU
# No accounting database; per-job memory is sampled so that --mem is enforced.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=2
JobAcctGatherParams=OverMemoryKill
JobCompType=jobcomp/none
# Jobs end promptly at their limit; finished jobs stay visible to scontrol for 10 minutes.
OverTimeLimit=0
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
MaxArraySize=10001
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
CHANGED=0
if ! cmp -s "$NEW_CONF" "$CONF"; then
    log "writing $CONF (node $HOST: $CPUS CPUs, $MEM MB)"
    install -m 0644 "$NEW_CONF" "$CONF"
    CHANGED=1
fi
rm -f "$NEW_CONF"
# Debian ships a plugstack.conf that includes a directory; an empty cgroup.conf keeps
# slurmd quiet about a missing file.
[[ -f $SLURM_DIR/cgroup.conf ]] || echo "CgroupAutomount=no" >"$SLURM_DIR/cgroup.conf"

# --------------------------------------------------------------------------- daemons
running() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop() {
    if running "$1"; then
        kill "$(cat "$1")"
        for _ in $(seq 50); do running "$1" || break; sleep 0.1; done
    fi
}
if [[ $CHANGED == 1 ]]; then
    stop /run/slurmd.pid
    stop /run/slurmctld.pid
fi
if ! running /run/slurmctld.pid; then
    log "starting slurmctld"
    /usr/sbin/slurmctld
fi
if ! running /run/slurmd.pid; then
    log "starting slurmd"
    /usr/sbin/slurmd
fi

# --------------------------------------------------------------------------- ready?
state=""
for _ in $(seq $((WAIT_S * 2))); do
    state=$(sinfo -h -n "$HOST" -o '%t' 2>/dev/null | head -n 1 || true)
    case $state in
    idle | mix | alloc) break ;;
    drain* | down*)
        scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
done
case $state in
idle | mix | alloc) log "ready: node $HOST is $state in partition $PARTITION" ;;
*)
    log "node $HOST is not idle after ${WAIT_S}s (state: ${state:-no answer})"
    tail -n 20 "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" >&2 || true
    exit 1
    ;;
esac
