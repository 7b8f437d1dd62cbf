#include "util/cpu_share.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace tessera {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// CPUs' worth of a quota over a period, or 0 when either is absent or
// unlimited ("max", -1).
double QuotaCpus(const std::string& quota, const std::string& period) {
  try {
    if (quota.empty() || period.empty() || quota == "max") return 0;
    const double q = std::stod(quota), p = std::stod(period);
    return q > 0 && p > 0 ? q / p : 0;
  } catch (...) {
    return 0;
  }
}

// The path and its ancestors up to the hierarchy's root: "/a/b" -> "/a/b", "/a", "".
std::vector<std::string> SelfAndAncestors(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    out.push_back(path);
    const size_t slash = path.rfind('/');
    if (path.empty() || slash == std::string::npos) break;
    path.resize(slash);
  }
  return out;
}

}  // namespace

double CpuShare::cpus() const {
  const double a = std::max(1, affinity_cpus);
  return quota_cpus > 0 ? std::min(a, quota_cpus) : a;
}

std::string CpuShare::Describe() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2g CPU%s", cpus(), cpus() >= 2 ? "s" : "");
  std::string text = buf;
  if (quota_cpus > 0 && quota_cpus < affinity_cpus) text += " (cgroup quota in " + quota_file + ")";
  return text;
}

CpuShare ReadCpuShare(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  CpuShare share;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) share.affinity_cpus = std::max(1, CPU_COUNT(&set));
  std::ifstream in(proc_self_cgroup);
  std::string line;
  auto consider = [&share](const std::string& file, double cpus) {
    if (cpus > 0 && (share.quota_cpus == 0 || cpus < share.quota_cpus)) {
      share.quota_cpus = cpus;
      share.quota_file = file;
    }
  };
  while (std::getline(in, line)) {
    // "ID:CONTROLLERS:PATH"; v2 is "0::PATH".
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      for (const std::string& dir : SelfAndAncestors(path)) {
        const std::string file = cgroup_root + dir + "/cpu.max";
        std::istringstream fields(ReadFirstLine(file));
        std::string quota, period;
        fields >> quota >> period;
        consider(file, QuotaCpus(quota, period));
      }
      continue;
    }
    std::istringstream list(controllers);
    std::string c;
    bool cpu = false;
    while (std::getline(list, c, ',')) cpu = cpu || c == "cpu";
    if (!cpu) continue;
    for (const std::string& mount : {std::string("/cpu"), std::string("/cpu,cpuacct"), std::string("/" + controllers)})
      for (const std::string& dir : SelfAndAncestors(path)) {
        const std::string base = cgroup_root + mount + dir;
        consider(base + "/cpu.cfs_quota_us",
                 QuotaCpus(ReadFirstLine(base + "/cpu.cfs_quota_us"), ReadFirstLine(base + "/cpu.cfs_period_us")));
      }
  }
  return share;
}

}  // namespace tessera
