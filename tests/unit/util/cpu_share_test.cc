// util/cpu_share.h: the CPU a worker may use, from its affinity and its
// cgroup's CPU quota, read from files laid out as the kernel does (v1 with
// the cpu controller mounted alone or beside cpuacct, v2, nested cgroups
// whose ancestor holds the tighter quota, unlimited and unreadable files).
#include "util/cpu_share.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct FakeCgroups {
  fs::path root;
  FakeCgroups() {
    root = fs::temp_directory_path() / ("cpu_share_test_" + std::to_string(std::random_device{}()));
    fs::create_directories(root);
  }
  ~FakeCgroups() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void Write(const std::string& relative, const std::string& text) const {
    const fs::path p = root / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  std::string Proc() const { return (root / "proc_self_cgroup").string(); }
  std::string Sys() const { return (root / "sys").string(); }
};

TEST_CASE("cpu share: cgroup v1 quota, the tightest of the cgroup and its ancestors", "[util][cpu]") {
  FakeCgroups f;
  f.Write("proc_self_cgroup", "4:memory:/ts-emu-0\n3:cpu,cpuacct:/bench/ts-emu-0\n0::/");
  SECTION("the cgroup's own quota (cpu,cpuacct mount)") {
    f.Write("sys/cpu,cpuacct/bench/ts-emu-0/cpu.cfs_quota_us", "1416");
    f.Write("sys/cpu,cpuacct/bench/ts-emu-0/cpu.cfs_period_us", "10000");
    const CpuShare s = ReadCpuShare(f.Proc(), f.Sys());
    CHECK(s.quota_cpus == Approx(0.1416));
    CHECK(s.cpus() == Approx(0.1416));
    CHECK(s.Describe().find("cgroup quota") != std::string::npos);
  }
  SECTION("an ancestor's tighter quota (cpu mount), the cgroup's own unlimited") {
    f.Write("sys/cpu/bench/ts-emu-0/cpu.cfs_quota_us", "-1");
    f.Write("sys/cpu/bench/ts-emu-0/cpu.cfs_period_us", "100000");
    f.Write("sys/cpu/bench/cpu.cfs_quota_us", "50000");
    f.Write("sys/cpu/bench/cpu.cfs_period_us", "100000");
    CHECK(ReadCpuShare(f.Proc(), f.Sys()).quota_cpus == Approx(0.5));
  }
  SECTION("no quota anywhere: the affinity's CPUs") {
    f.Write("sys/cpu/bench/ts-emu-0/cpu.cfs_quota_us", "-1");
    f.Write("sys/cpu/bench/ts-emu-0/cpu.cfs_period_us", "100000");
    const CpuShare s = ReadCpuShare(f.Proc(), f.Sys());
    CHECK(s.quota_cpus == 0);
    CHECK(s.cpus() == s.affinity_cpus);
    CHECK(s.affinity_cpus >= 1);
  }
  SECTION("a quota above the affinity's CPUs does not raise them") {
    f.Write("sys/cpu/bench/ts-emu-0/cpu.cfs_quota_us", "100000000");
    f.Write("sys/cpu/bench/ts-emu-0/cpu.cfs_period_us", "100000");
    const CpuShare s = ReadCpuShare(f.Proc(), f.Sys());
    CHECK(s.quota_cpus == Approx(1000));
    CHECK(s.cpus() == s.affinity_cpus);
  }
}

TEST_CASE("cpu share: cgroup v2 cpu.max", "[util][cpu]") {
  FakeCgroups f;
  f.Write("proc_self_cgroup", "0::/system.slice/tessera-worker.service");
  SECTION("a quota") {
    f.Write("sys/system.slice/tessera-worker.service/cpu.max", "25000 100000");
    CHECK(ReadCpuShare(f.Proc(), f.Sys()).quota_cpus == Approx(0.25));
  }
  SECTION("max on the service, a quota on its slice") {
    f.Write("sys/system.slice/tessera-worker.service/cpu.max", "max 100000");
    f.Write("sys/system.slice/cpu.max", "150000 100000");
    CHECK(ReadCpuShare(f.Proc(), f.Sys()).quota_cpus == Approx(1.5));
  }
  SECTION("garbage and missing files count as no quota") {
    f.Write("sys/system.slice/tessera-worker.service/cpu.max", "lots");
    CHECK(ReadCpuShare(f.Proc(), f.Sys()).quota_cpus == 0);
    CHECK(ReadCpuShare(f.Proc(), (f.root / "nowhere").string()).quota_cpus == 0);
    CHECK(ReadCpuShare((f.root / "no_proc_file").string(), f.Sys()).quota_cpus == 0);
  }
}

}  // namespace
}  // namespace tessera
