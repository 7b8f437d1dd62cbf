// The CPU a process may use: how many CPUs its affinity mask allows,
// capped by its cgroup's CPU bandwidth quota (cgroup v2 cpu.max, v1
// cpu.cfs_quota_us / cpu.cfs_period_us, the tightest of the process's
// cgroup and its ancestors). A worker compares it with its compute threads
// to tell whether its transport has a CPU of its own
// (daemon/cluster/worker.h WorkerOptions::flush_sends).
#pragma once

#include <string>

namespace tessera {

struct CpuShare {
  int affinity_cpus = 1;   // CPUs in the affinity mask (>= 1)
  double quota_cpus = 0;   // CPUs' worth of the cgroup quota; 0: no quota
  std::string quota_file;  // where the quota was read ("" without one)
  // The smaller of the two: what the process can run at once.
  double cpus() const;
  // "2 CPUs", "0.14 CPU (cgroup quota in /sys/fs/cgroup/cpu/ts-emu-0/cpu.cfs_quota_us)".
  std::string Describe() const;
};

// Reads the calling process's share. `proc_self_cgroup` and `cgroup_root`
// are the files the kernel provides (tests give their own): the process's
// cgroup paths come from the first, and are looked up under the second
// (v2: ROOT/PATH/cpu.max; v1: ROOT/cpu/PATH or ROOT/cpu,cpuacct/PATH). A
// file that is missing or unreadable counts as no quota.
CpuShare ReadCpuShare(const std::string& proc_self_cgroup = "/proc/self/cgroup",
                      const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace tessera
