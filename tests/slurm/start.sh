#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the tests that submit real jobs
# (pytest -m slurm). Installs Debian's slurm-wlm and munge when missing (needs root), writes a
# minimal slurm.conf (this host, its CPUs and memory, one partition, no cgroups and no
# accounting, so that it runs in a container too) and starts munged, slurmctld and slurmd.
# Safe to run again: what already runs is left running. Prints `sinfo` at the end.
set -euo pipefail

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    if [ "$(id -u)" != 0 ]; then
        echo "slurm: slurm-wlm and munge are not installed and this is not root; skipped" >&2
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
fi
if [ "$(id -u)" != 0 ]; then
    echo "slurm: not root; the daemons are not started here" >&2
    exit 0
fi

host=$(hostname -s)
cpus=$(nproc)
# slurmd refuses a node that declares more memory than it has: leave it 10 % headroom.
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
conf_dir=/etc/slurm
state=/var/spool/slurmctld
spool=/var/spool/slurmd
logs=/var/log/slurm
mkdir -p "$conf_dir" "$state" "$spool" "$logs" /run/munge /var/lib/munge /var/log/munge

# munge: a key, and the daemon (as root: a container has no init to start it as munge).
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key
if ! munge -n >/dev/null 2>&1; then
    if id munge >/dev/null 2>&1; then
        runuser -u munge -- munged --force
    else
        munged --force
    fi
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
fi

cat >"$conf_dir/slurm.conf.new" <<CONF
# Written by tests/slurm/start.sh: one node, this host.
ClusterName=hpsearch-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
StateSaveLocation=$state
SlurmdSpoolDir=$spool
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=10
Waittime=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
changed=1
if [ -f "$conf_dir/slurm.conf" ] && cmp -s "$conf_dir/slurm.conf" "$conf_dir/slurm.conf.new"; then
    changed=0
fi
mv "$conf_dir/slurm.conf.new" "$conf_dir/slurm.conf"
# Debian's slurmd reads cgroup.conf when it exists; none of its plugins are used here.
rm -f "$conf_dir/cgroup.conf"

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if [ "$changed" = 1 ]; then
    for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
        if running "$pidfile"; then kill "$(cat "$pidfile")"; sleep 1; fi
    done
fi
running /run/slurmctld.pid || slurmctld
running /run/slurmd.pid || slurmd

for _ in $(seq 60); do
    if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
        sinfo
        exit 0
    fi
    # A node that came up DOWN (a restart) is put back.
    scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
    sleep 1
done
echo "slurm: the node did not become idle; slurmd says:" >&2
tail -n 20 "$logs/slurmd.log" >&2 || true
tail -n 20 "$logs/slurmctld.log" >&2 || true
sinfo >&2 || true
exit 1
