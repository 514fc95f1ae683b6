#!/usr/bin/env bash
# A one-node Slurm cluster on loopback for the tests (tests/e2e/test_slurm.py) and for trying
# `yolo-orch slurm` by hand: Debian's slurm-wlm and munge, installed when missing (root, apt).
#
#   scripts/slurm_cluster.sh start DIR [NODES]   # config, state and logs in DIR; prints `export SLURM_CONF=...`
#   scripts/slurm_cluster.sh stop DIR
#
# Every Slurm command finds this cluster through SLURM_CONF=DIR/slurm.conf. Up in a few seconds
# once installed (the install: about 1.5 minutes). NODES=2 adds a second node on this machine, a slurmd
# of its own named `localhost` (a name that resolves here), so a job may span two "nodes".
set -euo pipefail
action=${1:-}; dir=${2:-}; nodes=${3:-1}
[ -n "$action" ] && [ -n "$dir" ] || { echo "usage: scripts/slurm_cluster.sh start|stop DIR" >&2; exit 2; }
mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
conf="$dir/slurm.conf"

stop() {
  for pidfile in "$dir"/slurmctld.pid "$dir"/slurmd*.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    pgrep -f "slurm(ctld|d) .*-f $conf" >/dev/null || return 0
    sleep 0.2
  done
  pkill -9 -f "slurm(ctld|d) .*-f $conf" || true
}

install() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
  [ "$(id -u)" = 0 ] || { echo "slurm_cluster: slurm-wlm and munge are missing and installing them needs root" >&2; exit 1; }
  echo "slurm_cluster: installing slurm-wlm and munge (apt)" >&2
  # one apt-get at a time among the test processes (scripts/browser.sh takes the same lock)
  exec 9>/tmp/yolo-orch-apt.lock
  flock -w 900 9
  # the lock is this shell's alone (9>&-): a daemon started by a package's install script (munged), or below
  # (slurmctld, slurmd), would inherit it and hold it for its lifetime, and the suite's next apt-get
  # (scripts/browser.sh: chromium) would wait on it until its timeout
  if ! { command -v slurmctld >/dev/null && command -v munged >/dev/null; }; then
    apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 9>&-
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq slurm-wlm munge >/dev/null 9>&-
  fi
  exec 9>&-
}

ensure_munge() {  # Slurm's authentication: a key and a running munged (apt may not have started it)
  munge -n >/dev/null 2>&1 && return 0
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  su -s /bin/sh munge -c munged 2>/dev/null || munged --force
  for _ in $(seq 50); do
    munge -n >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "slurm_cluster: munged did not start (see /var/log/munge/munged.log)" >&2
  exit 1
}

start() {
  install
  stop
  local host ports cpus; host=$(hostname -s)
  # (nproc counts OMP_NUM_THREADS as the CPUs it may use: Ultralytics sets it to 1 in every process
  # that imports it, so a test process would describe a 1-CPU node)
  # free ports: another cluster (a second checkout's tests) may hold Slurm's default 6817/6818
  ports=$(python3 -c 'import socket; s=[socket.socket() for _ in "abc"]; [x.bind(("127.0.0.1", 0)) for x in s]; print(*[x.getsockname()[1] for x in s])')
  set -- $ports
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  mkdir -p "$dir/state" "$dir/spool-$host" "$dir/spool-localhost"
  cat > "$conf" <<CONF
ClusterName=yoloorch
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=3600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
CONF
  # a second node: its own slurmd on its own port (each claims this machine's CPUs: a test cluster)
  [ "$nodes" = 2 ] && echo "NodeName=localhost NodeHostname=$host NodeAddr=127.0.0.1 Port=$3 CPUs=$cpus State=UNKNOWN" >> "$conf"
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$conf"
  ensure_munge
  slurmctld -f "$conf"
  slurmd -f "$conf" -N "$host"
  [ "$nodes" = 2 ] && slurmd -f "$conf" -N localhost
  export SLURM_CONF="$conf"
  for _ in $(seq 100); do
    if [ "$(sinfo -h -N -o %T 2>/dev/null | grep -cx idle)" = "$nodes" ]; then
      echo "export SLURM_CONF=$conf"
      return 0
    fi
    sleep 0.2
  done
  echo "slurm_cluster: the node did not come up; see $dir/slurmctld.log and $dir/slurmd.log" >&2
  exit 1
}

case "$action" in start) start;; stop) stop;; *) echo "usage: scripts/slurm_cluster.sh start|stop DIR" >&2; exit 2;; esac
