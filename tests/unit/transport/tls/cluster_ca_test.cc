// `tessera certs` underneath (transport/tls/cluster_ca.h): a CA and the
// certificates it issues form a chain that verifies, carry the names peers
// check, keep their keys private, and every mistake is refused with a
// message naming the file. OpenSSL's own command line (`openssl verify`) is
// the independent check in tests/integration/cluster_tls.sh.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "transport/tls/cluster_ca.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("tessera-ca-test-" + tag + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

unsigned Mode(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

Status Init(const fs::path& dir, bool force = false) {
  CaOptions o;
  o.dir = dir.string();
  o.force = force;
  return CreateClusterCa(o);
}

Status Issue(const fs::path& dir, const std::string& name, std::vector<std::string> hosts = {}, bool force = false) {
  IssueOptions o;
  o.dir = dir.string();
  o.name = name;
  o.hosts = std::move(hosts);
  o.force = force;
  return IssueDeviceCertificate(o);
}

}  // namespace

TEST_CASE("a certificate issued by the cluster CA verifies against it and names the device and loopback") {
  ScratchDir d("chain");
  REQUIRE(Init(d.path).ok());
  auto st = Issue(d.path, "w1");
  INFO(st.ToString());
  REQUIRE(st.ok());
  const std::string ca = Read(d.path / "ca.crt"), crt = Read(d.path / "w1.crt");
  CHECK(VerifyIssuedBy(ca, crt).ok());
  auto sans = SubjectAltNames(crt);
  REQUIRE(sans.ok());
  CHECK(*sans == std::vector<std::string>{"DNS:w1", "IP:127.0.0.1", "DNS:localhost"});
  auto id = LoadTlsIdentity(d.path.string(), "w1");
  INFO(id.status().ToString());
  CHECK(id.ok());
}

TEST_CASE("host entries replace the loopback defaults: IPv4 IPv6 and DNS names") {
  ScratchDir d("hosts");
  REQUIRE(Init(d.path).ok());
  REQUIRE(Issue(d.path, "pi1", {"10.0.0.11", "fd00::11", "pi1.lab"}).ok());
  auto sans = SubjectAltNames(Read(d.path / "pi1.crt"));
  REQUIRE(sans.ok());
  CHECK(*sans == std::vector<std::string>{"DNS:pi1", "IP:10.0.0.11", "IP:fd00::11", "DNS:pi1.lab"});
  auto bad = Issue(d.path, "pi2", {"10.0.0.12,DNS:evil"});
  CHECK(bad.IsInvalidArgument());
  CHECK_THAT(bad.message(), Catch::Contains("10.0.0.12,DNS:evil"));
  CHECK_FALSE(fs::exists(d.path / "pi2.key"));
}

TEST_CASE("keys are written with mode 0600 and certificates 0644") {
  ScratchDir d("modes");
  REQUIRE(Init(d.path).ok());
  REQUIRE(Issue(d.path, "gateway").ok());
  CHECK(Mode(d.path / "ca.key") == 0600);
  CHECK(Mode(d.path / "gateway.key") == 0600);
  CHECK(Mode(d.path / "ca.crt") == 0644);
  CHECK(Mode(d.path / "gateway.crt") == 0644);
}

TEST_CASE("a certificate from another CA does not verify against the cluster CA") {
  ScratchDir a("ca-a"), b("ca-b");
  REQUIRE(Init(a.path).ok());
  REQUIRE(Init(b.path).ok());
  REQUIRE(Issue(b.path, "w1").ok());
  auto st = VerifyIssuedBy(Read(a.path / "ca.crt"), Read(b.path / "w1.crt"));
  CHECK_FALSE(st.ok());
  // Mixed into one TLS directory, the identity is refused before any connection.
  fs::copy_file(b.path / "w1.crt", a.path / "w1.crt");
  fs::copy_file(b.path / "w1.key", a.path / "w1.key");
  auto id = LoadTlsIdentity(a.path.string(), "w1");
  REQUIRE_FALSE(id.ok());
  CHECK_THAT(id.status().message(), Catch::Contains("w1.crt does not verify against") && Catch::Contains("ca.crt"));
}

TEST_CASE("existing files are not overwritten without --force") {
  ScratchDir d("force");
  REQUIRE(Init(d.path).ok());
  const std::string ca_before = Read(d.path / "ca.crt");
  auto again = Init(d.path);
  CHECK_FALSE(again.ok());
  CHECK_THAT(again.message(), Catch::Contains("ca.key already exists") || Catch::Contains("ca.crt already exists"));
  CHECK(Read(d.path / "ca.crt") == ca_before);

  REQUIRE(Issue(d.path, "w1").ok());
  const std::string w1_before = Read(d.path / "w1.key");
  auto twice = Issue(d.path, "w1");
  CHECK_FALSE(twice.ok());
  CHECK_THAT(twice.message(), Catch::Contains("w1.") && Catch::Contains("--force"));
  CHECK(Read(d.path / "w1.key") == w1_before);
  REQUIRE(Issue(d.path, "w1", {}, /*force=*/true).ok());
  CHECK(Read(d.path / "w1.key") != w1_before);
  CHECK(VerifyIssuedBy(ca_before, Read(d.path / "w1.crt")).ok());
}

TEST_CASE("issuing without a CA names the missing file and writes nothing") {
  ScratchDir d("noca");
  fs::create_directories(d.path);
  auto st = Issue(d.path, "w1");
  CHECK(st.IsNotFound());
  CHECK_THAT(st.message(), Catch::Contains((d.path / "ca.crt").string()) && Catch::Contains("tessera certs init"));
  CHECK_FALSE(fs::exists(d.path / "w1.key"));
  CHECK_FALSE(fs::exists(d.path / "w1.crt"));
  // A certificate without its key (copied to a board) cannot issue either.
  ScratchDir ca("noca-src");
  REQUIRE(Init(ca.path).ok());
  fs::copy_file(ca.path / "ca.crt", d.path / "ca.crt");
  auto no_key = Issue(d.path, "w1");
  CHECK(no_key.IsNotFound());
  CHECK_THAT(no_key.message(), Catch::Contains((d.path / "ca.key").string()));
}

TEST_CASE("names that are not plain device names are refused") {
  ScratchDir d("names");
  REQUIRE(Init(d.path).ok());
  for (const char* name : {"", "ca", "../w1", "w 1", ".hidden", "a/b"}) {
    INFO(name);
    CHECK(Issue(d.path, name).IsInvalidArgument());
  }
  CHECK(Issue(d.path, std::string(65, 'a')).IsInvalidArgument());
  CHECK(fs::exists(d.path / "ca.key"));
  CHECK(Mode(d.path / "ca.key") == 0600);
}

TEST_CASE("a TLS directory with a missing or mismatched file names it") {
  ScratchDir d("identity");
  REQUIRE(Init(d.path).ok());
  REQUIRE(Issue(d.path, "w1").ok());
  REQUIRE(Issue(d.path, "w2").ok());
  auto missing = LoadTlsIdentity(d.path.string(), "w3");
  CHECK(missing.status().IsNotFound());
  CHECK_THAT(missing.status().message(), Catch::Contains((d.path / "w3.crt").string()));
  // w1.crt with w2.key.
  fs::copy_file(d.path / "w2.key", d.path / "w1.key", fs::copy_options::overwrite_existing);
  auto mismatch = LoadTlsIdentity(d.path.string(), "w1");
  REQUIRE_FALSE(mismatch.ok());
  CHECK_THAT(mismatch.status().message(), Catch::Contains("w1.key is not the key of"));
  std::ofstream(d.path / "w2.crt") << "not a certificate";
  auto garbage = LoadTlsIdentity(d.path.string(), "w2");
  REQUIRE_FALSE(garbage.ok());
  CHECK_THAT(garbage.status().message(), Catch::Contains("w2.crt is not a PEM certificate"));
  fs::remove(d.path / "ca.crt");
  auto no_ca = LoadTlsIdentity(d.path.string(), "w2");
  CHECK(no_ca.status().IsNotFound());
  CHECK_THAT(no_ca.status().message(), Catch::Contains((d.path / "ca.crt").string()));
}
