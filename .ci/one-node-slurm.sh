#!/usr/bin/env bash
# Copied from the project's shared tooling (shared/slurm/one-node.sh) so a clean checkout has it.
# one-node.sh — throw-away single-node Slurm cluster (munged + slurmctld + slurmd), run as root.
#   start   install Debian packages if missing, write /etc/slurm/slurm.conf, start the daemons, wait
#           (ONE_NODE_TIMEOUT s, default 60) until the node is idle; prints the node name on stdout.
#   stop    cancel all jobs, stop slurmd, slurmctld and munged by PID.
#   status  show the daemons and sinfo; exit 0 if all three run, 3 otherwise.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
NODE=$(hostname -s)
RUN=/run/slurm LOG=/var/log/slurm MUNGE_PID=/run/munge/munged.pid
TIMEOUT=${ONE_NODE_TIMEOUT:-60}

say() { echo "one-node.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }
# alive PIDFILE NAME: the pidfile names a live process called NAME (guards against stale pidfiles)
alive() { local p; p=$(cat "$1" 2>/dev/null) && [[ -n $p && $(cat "/proc/$p/comm" 2>/dev/null) == "$2"* ]]; }
running() { alive $MUNGE_PID munged && alive $RUN/slurmctld.pid slurmctld && alive $RUN/slurmd.pid slurmd; }
stop_pid() { # PIDFILE NAME: SIGTERM, wait up to 10 s, then SIGKILL
  alive "$1" "$2" || { rm -f "$1"; return 0; }
  local p; p=$(cat "$1"); kill "$p" 2>/dev/null || true
  for _ in {1..50}; do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$p" 2>/dev/null; then say "$2 ($p) ignored SIGTERM, killing"; kill -9 "$p" || true; fi
  rm -f "$1"
}

install_pkgs() {
  if command -v munged && command -v slurmctld && command -v slurmd && command -v sbatch; then return 0; fi >/dev/null
  say "installing slurmctld slurmd slurm-client munge ..."
  local prc=/usr/sbin/policy-rc.d own=0 rc=0
  # keep the packages' postinst from starting services (there is no init system)
  if [[ ! -e $prc ]]; then printf '#!/bin/sh\nexit 101\n' >$prc && chmod 755 $prc && own=1; fi
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null; } || rc=$?
  if ((own)); then rm -f $prc; fi
  ((rc == 0)) || die "apt-get install failed (rc=$rc)"
}

start_munge() {
  if munge -n >/dev/null 2>&1; then return 0; fi   # a munged already answers
  local key=/etc/munge/munge.key
  if [[ ! -s $key ]]; then mungekey --create --keyfile=$key || die "cannot create $key"; fi
  chown munge:munge $key && chmod 0400 $key
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- munged </dev/null >/dev/null 2>&1 || die "munged did not start; see /var/log/munge/munged.log"
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || die "munge round-trip failed; see /var/log/munge/munged.log"
}

write_conf() { # node line from `slurmd -C` (CPUs, sockets, cores, threads), RealMemory at 90 %
  local hw mem; hw=$(slurmd -C | head -n1) || die "slurmd -C failed"
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
  hw=$(sed -e 's/^NodeName=[^ ]* *//' -e 's/ *RealMemory=[0-9]*//' <<<"$hw")
  mkdir -p /etc/slurm
  cat >/etc/slurm/slurm.conf <<EOF
# Written by one-node.sh: test cluster, no cgroups, no accounting; explicit addresses (no DNS needed)
ClusterName=onenode
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerParameters=batch_sched_delay=0
NodeName=$NODE NodeAddr=127.0.0.1 $hw RealMemory=$((mem * 9 / 10)) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  [[ $EUID -eq 0 ]] || die "must run as root"
  install_pkgs; start_munge
  if ! { alive $RUN/slurmctld.pid slurmctld && alive $RUN/slurmd.pid slurmd; }; then
    stop_pid $RUN/slurmd.pid slurmd; stop_pid $RUN/slurmctld.pid slurmctld   # half up: restart both
    write_conf
    rm -rf /var/spool/slurmctld /var/spool/slurmd                             # fresh state each start
    mkdir -p /var/spool/slurmctld /var/spool/slurmd $RUN $LOG
    : >$LOG/slurmctld.log; : >$LOG/slurmd.log
    slurmctld </dev/null >>$LOG/slurmctld.log 2>&1 || die "slurmctld did not start; see $LOG/slurmctld.log"
    slurmd -N "$NODE" </dev/null >>$LOG/slurmd.log 2>&1 || die "slurmd did not start; see $LOG/slurmd.log"
  fi
  local t0=$SECONDS state
  while ((SECONDS - t0 < TIMEOUT)); do
    state=$(timeout 5 sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
    if [[ $state =~ ^(idle|mixed|allocated|completing)$ ]]; then echo "$NODE"; return 0; fi
    ((SECONDS - t0 < 5)) || running || break   # a daemon died: stop waiting
    sleep 0.5
  done
  tail -n 5 $LOG/slurmctld.log $LOG/slurmd.log >&2 || true
  die "node $NODE not ready (state '${state:-none}'; daemons $(running && echo up || echo down))"
}

stop() {
  if alive $RUN/slurmctld.pid slurmctld; then
    timeout 10 scancel --partition=debug 2>/dev/null || true
    for _ in {1..20}; do [[ -z $(timeout 5 squeue -h 2>/dev/null) ]] && break; sleep 0.5; done
  fi
  stop_pid $RUN/slurmd.pid slurmd; stop_pid $RUN/slurmctld.pid slurmctld; stop_pid $MUNGE_PID munged
}

status() {
  local d f
  for d in munged:$MUNGE_PID slurmctld:$RUN/slurmctld.pid slurmd:$RUN/slurmd.pid; do
    f=${d#*:} d=${d%%:*}
    if alive "$f" "$d"; then echo "$d: running (pid $(cat "$f"))"; else echo "$d: stopped"; fi
  done
  running || return 3; sinfo
}
case ${1:-} in
  start | stop | status) "$1" ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
