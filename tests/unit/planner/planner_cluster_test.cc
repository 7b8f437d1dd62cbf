// Cluster files and quantities with units.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "transport/wire/mcu_program.h"
#include "util/quantity.h"

using namespace tessera;

TEST_CASE("quantity: sizes, bandwidths, durations", "[planner][cluster]") {
  CHECK(*ParseByteSize("564KiB") == 564 * 1024);
  CHECK(*ParseByteSize("2GiB") == int64_t{2} << 30);
  CHECK(*ParseByteSize("1.5 MiB") == 1572864);
  CHECK(*ParseByteSize("512MB") == 512000000);
  CHECK(*ParseByteSize("4096") == 4096);
  CHECK_FALSE(ParseByteSize("2GB/s").ok());
  CHECK(ParseByteSize("12 parsecs").status().message().find("KiB") != std::string::npos);

  CHECK(ParseBandwidth("1Gbit/s")->bytes_per_s == Approx(125e6));
  CHECK(ParseBandwidth("100Mbit/s")->bytes_per_s == Approx(12.5e6));
  // UART 8N1: 10 bits per byte on the wire.
  const Bandwidth uart = *ParseBandwidth("115200baud");
  CHECK(uart.bytes_per_s == Approx(11520));
  CHECK(uart.uart);
  CHECK(ParseBandwidth("12MB/s")->bytes_per_s == Approx(12e6));
  CHECK_FALSE(ParseBandwidth("100").ok());
  CHECK_FALSE(ParseBandwidth("100Mbit").ok());

  CHECK(*ParseDuration("0.2ms") == Approx(0.2e-3));
  CHECK(*ParseDuration("50us") == Approx(50e-6));
  CHECK(*ParseFrequency("480MHz") == Approx(480e6));
  CHECK(*ParseFrequency("1.5e9") == Approx(1.5e9));
}

TEST_CASE("cluster: an MCU whose RAM the firmware alone fills is refused by name", "[cluster]") {
  const std::string yaml = R"(
devices:
  - { name: pi1, kind: linux, address: 127.0.0.1:7001, ram: 1GiB, flash: 4GiB, macs_per_s: 1e9 }
  - { name: tiny, kind: mcu, ram: 16KiB, flash: 64KiB, macs_per_s: 1e7, serial: /dev/ttyUSB0, baud: 115200, via: pi1 }
)";
  auto c = ParseCluster(yaml, "tiny.yaml", PresetDirectories());
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("device tiny: ram 16.0 KiB leaves nothing for a program"));
  CHECK_THAT(c.status().message(), Catch::Contains("firmware itself takes"));
}

TEST_CASE("cluster: a mixed Pi + MCU file with presets", "[planner][cluster]") {
  const std::string yaml = R"(devices:
  - name: pi1
    kind: linux
    preset: RPi4-4GB
    address: 10.0.0.11:7070
  - name: pi2
    address: 10.0.0.12:7070
    ram: 2GiB
    flash: 16GiB
    cpu_hz: 1.5GHz
    cycles_per_mac: 0.5
  - name: mcu1
    preset: STM32F446RE
    serial: /dev/ttyUSB0
    baud: 115200
    via: pi1
links:
  default: { bandwidth: 1Gbit/s, latency: 0.2ms }
)";
  auto c = ParseCluster(yaml, "mixed.yaml", PresetDirectories());
  REQUIRE(c.ok());
  REQUIRE(c->size() == 3);
  const Device& mcu = c->devices[2];
  CHECK(mcu.kind == DeviceKind::kMcu);
  // The preset's 128 KiB RAM and 512 KiB flash, less what the tessera
  // firmware itself takes: the plan gets the rest.
  CHECK(mcu.ram_bytes == 128 * 1024 - mcu::kFirmwareRamBytes);
  CHECK(mcu.flash_bytes == 512 * 1024 - mcu::kFirmwareFlashBytes);
  CHECK(mcu.macs_per_s == Approx(180e6 / 9));  // METHODS §5: f / CpM
  CHECK(c->devices[1].macs_per_s == Approx(3e9));
  CHECK(c->devices[0].preset == "RPi4-4GB");
  // pi1 -> pi2: 0.2 ms + 1e6 B / 125e6 B/s = 8.2 ms.
  CHECK(c->TransferSeconds(0, 1, 1000000) == Approx(0.0082));
  // mcu1 -> pi1 over the UART: 1152 B / 11520 B/s = 0.1 s.
  CHECK(c->TransferSeconds(2, 0, 1152) == Approx(0.1));
  // mcu1 -> pi2 goes through pi1: 0.1 s + 0.2 ms + 1152/125e6.
  CHECK(c->TransferSeconds(2, 1, 1152) == Approx(0.1 + 0.2e-3 + 1152 / 125e6));
}

namespace {

// Two Pis, three MCUs hanging off them; `pairs` is the links.pairs list.
std::string McuChainYaml(const std::string& pairs) {
  return R"(devices:
  - { name: pi1, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9, address: 10.0.0.1:7070 }
  - { name: mcu1, preset: STM32F446RE, serial: /dev/ttyUSB0, baud: 115200, via: pi1 }
  - { name: mcu2, preset: STM32F446RE, serial: /dev/ttyUSB1, baud: 115200, via: pi1 }
  - { name: mcu3, preset: STM32F446RE, serial: /dev/ttyUSB2, baud: 115200, via: pi1 }
links:
  default: { bandwidth: 1Gbit/s }
  pairs:
)" + pairs;
}

}  // namespace

namespace {

std::string ErrorsOf(const std::string& yaml) {
  auto c = ParseCluster(yaml, "bad.yaml", PresetDirectories());
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == StatusCode::kInvalidArgument);
  return c.status().message();
}

}  // namespace

TEST_CASE("cluster: MCUs joined UART-to-UART are one hop and name their UARTs", "[planner][cluster][mcu]") {
  SECTION("ports in order of the pairs, or as given") {
    auto c = ParseCluster(McuChainYaml("    - { between: [mcu1, mcu2], bandwidth: 115200baud }\n"
                                       "    - { between: [mcu3, mcu2], bandwidth: 115200baud, ports: [1, 2] }\n"),
                          "chain.yaml", PresetDirectories());
    REQUIRE(c.ok());
    CHECK(c->McuPort(1, 2) == 1);  // mcu1's first direct link: UART1
    CHECK(c->McuPort(2, 1) == 1);  // mcu2's too
    CHECK(c->McuPort(3, 2) == 1);  // as given: mcu3 UART1, mcu2 UART2
    CHECK(c->McuPort(2, 3) == 2);
    CHECK(c->McuPort(1, 3) == 0);  // not joined: through pi1
    CHECK(c->McuPort(0, 1) == 0);  // pi1 -> mcu1 is UART0, not a direct MCU link
    // One UART hop mcu1 -> mcu2: 1152 B / 11520 B/s; mcu1 -> mcu3 crosses pi1 (two UART hops).
    CHECK(c->TransferSeconds(1, 2, 1152) == Approx(0.1));
    CHECK(c->TransferSeconds(1, 3, 1152) == Approx(0.2));
  }
  SECTION("mistakes name the link and the fix") {
    CHECK_THAT(ErrorsOf(McuChainYaml("    - { between: [mcu1, mcu2], bandwidth: 1Mbit/s }\n")),
               Catch::Matchers::Contains("link mcu1-mcu2 joins two MCUs UART-to-UART; give its bandwidth in baud"));
    CHECK_THAT(ErrorsOf(McuChainYaml("    - { between: [mcu1, mcu2], bandwidth: 115200baud, ports: [0, 1] }\n")),
               Catch::Matchers::Contains("port '0' is not a UART an MCU can give a direct link (1..2"));
    CHECK_THAT(ErrorsOf(McuChainYaml("    - { between: [mcu1, mcu2], bandwidth: 115200baud, ports: [1] }\n")),
               Catch::Matchers::Contains("ports is [port of the first, port of the second]"));
    CHECK_THAT(ErrorsOf(McuChainYaml("    - { between: [mcu1, mcu2], bandwidth: 115200baud, ports: [1, 1] }\n"
                                     "    - { between: [mcu1, mcu3], bandwidth: 115200baud, ports: [1, 1] }\n")),
               Catch::Matchers::Contains("link mcu1-mcu3: UART1 of that MCU already joins another MCU"));
    CHECK_THAT(ErrorsOf(McuChainYaml("    - { between: [pi1, mcu2], bandwidth: 115200baud, ports: [1, 1] }\n")),
               Catch::Matchers::Contains("this link does not join two MCUs"));
    // Two direct links of one MCU: UART1, then UART2.
    const std::string four = McuChainYaml(
        "    - { between: [mcu1, mcu2], bandwidth: 115200baud }\n"
        "    - { between: [mcu1, mcu3], bandwidth: 115200baud }\n");
    auto ok = ParseCluster(four, "two.yaml", PresetDirectories());
    REQUIRE(ok.ok());
    CHECK(ok->McuPort(1, 3) == 2);
  }
}

TEST_CASE("cluster: every mistake is one line with file:line and a fix", "[planner][cluster]") {
  SECTION("unknown key") {
    const std::string e = ErrorsOf("devices:\n  - name: a\n    ram: 1MiB\n    flassh: 1MiB\n    flash: 1MiB\n"
                                   "    macs_per_s: 1e6\n");
    CHECK(e.find("bad.yaml:4: unknown key 'flassh'") != std::string::npos);
    CHECK(e.find("allowed keys") != std::string::npos);
  }
  SECTION("duplicate name") {
    const std::string e = ErrorsOf(
        "devices:\n  - { name: a, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\n"
        "  - { name: a, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\nlinks:\n  default: { bandwidth: 1Gbit/s }\n");
    CHECK(e.find("bad.yaml:3: duplicate device name 'a'") != std::string::npos);
  }
  SECTION("bad unit") {
    const std::string e = ErrorsOf("devices:\n  - { name: a, ram: 1MiBs, flash: 1MiB, macs_per_s: 1e6 }\n");
    CHECK(e.find("bad.yaml:2:") != std::string::npos);
    CHECK(e.find("unknown size unit 'MiBs'") != std::string::npos);
  }
  SECTION("missing link") {
    const std::string e = ErrorsOf(
        "devices:\n  - { name: a, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\n"
        "  - { name: b, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\n");
    CHECK(e.find("no link between a and b") != std::string::npos);
    CHECK(e.find("add links: default") != std::string::npos);
  }
  SECTION("unknown preset and link to a missing device") {
    const std::string e = ErrorsOf(
        "devices:\n  - { name: a, preset: STM32XYZ }\nlinks:\n  pairs:\n"
        "    - { between: [a, ghost], bandwidth: 1Mbit/s }\n");
    CHECK(e.find("bad.yaml:2: unknown preset 'STM32XYZ'") != std::string::npos);
    CHECK(e.find("STM32F446RE") != std::string::npos);  // the list of known presets
    CHECK(e.find("bad.yaml:5: link names device 'ghost'") != std::string::npos);
  }
  SECTION("not YAML") {
    const std::string e = ErrorsOf("devices: [ { name: a\n");
    CHECK(e.find("bad.yaml:") != std::string::npos);
    CHECK(e.find("not valid YAML") != std::string::npos);
  }
}

TEST_CASE("cluster: example files in configs/ load", "[planner][cluster]") {
  for (const char* f : {"configs/local-loopback.yaml", "configs/pi-cluster.yaml", "configs/stm32-pair.yaml",
                        "configs/pi-mcu-mixed.yaml"}) {
    auto c = LoadClusterFile(std::string(TESSERA_SOURCE_DIR) + "/" + f);
    INFO(f);
    CHECK(c.ok());
    if (!c.ok()) WARN(c.status().ToString());
  }
  CHECK(LoadClusterFile("/nonexistent/cluster.yaml").status().code() == StatusCode::kNotFound);
}

TEST_CASE("cluster: --devices N is N identical unlimited devices", "[planner][cluster]") {
  const Cluster c = UniformCluster(3);
  REQUIRE(c.size() == 3);
  CHECK(c.devices[2].ram_bytes == kUnlimitedBytes);
  CHECK(c.Homogeneous());
  CHECK(c.TransferSeconds(0, 1, 125000) == Approx(0.2e-3 + 1e-3));
}

// A "billion laughs" file: 10 levels of 10 aliases each, 10^10 leaves if
// expanded. yaml-cpp shares aliased nodes instead of copying them and
// ParseCluster walks only the keys it expects, so every placement of the
// bomb must be refused (it is never a valid device, link or quantity) in
// well under a second, not expanded (issue 14, tests/fuzz/fuzz_cluster.cc).
TEST_CASE("cluster: nested aliases (a YAML bomb) are refused quickly", "[planner][cluster]") {
  std::string bomb = "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    bomb += "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  const std::string device = "{ name: d, address: 127.0.0.1:1, macs_per_s: 1e9 }";
  const std::vector<std::string> placements = {
      "devices: *a9\n",
      "devices:\n  - { name: d, ram: *a9, macs_per_s: 1e9 }\n",
      "devices:\n  - *a9\n  - " + device + "\n",
      "devices:\n  - " + device + "\nlinks:\n  default: *a9\n",
      "devices:\n  - " + device + "\nlinks:\n  pairs: *a9\n",
      "devices:\n  - " + device + "\nlinks:\n  pairs:\n    - { between: *a9, bandwidth: 1Gbit/s }\n",
  };
  for (const std::string& tail : placements) {
    // The bomb's own keys (x0..x9) are unknown keys, an error already; what
    // this checks is that ParseCluster still reads the placement without
    // expanding it (the time), and refuses it.
    const std::string text = bomb + tail;
    const auto t0 = std::chrono::steady_clock::now();
    auto c = ParseCluster(text, "bomb.yaml", {});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(tail);
    CHECK_FALSE(c.ok());
    CHECK(seconds < 1.0);
    CHECK(c.status().message().find("bomb.yaml:") != std::string::npos);
  }
}

TEST_CASE("cluster: YAML nested 100 000 deep is refused, not a stack overflow", "[planner][cluster]") {
  for (const std::string& deep : {std::string(100000, '['), [] {
                                    std::string s;
                                    for (int i = 0; i < 50000; ++i) s += "{a: ";
                                    return s;
                                  }()}) {
    auto c = ParseCluster("devices: " + deep, "deep.yaml", {});
    CHECK_FALSE(c.ok());
    CHECK(c.status().message().find("deep.yaml") != std::string::npos);
  }
}

TEST_CASE("cluster: models: lists the model files it serves, relative to the file", "[planner][cluster]") {
  const std::string dir = "/tmp/tessera-cluster-models-test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/c.yaml";
  {
    std::ofstream out(path);
    out << "devices:\n  - { name: a, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\nmodels:\n  - det.onnx\n  - "
           "/abs/cls.onnx\n";
  }
  auto c = LoadClusterFile(path);
  REQUIRE(c.ok());
  CHECK(c->models == std::vector<std::string>{dir + "/det.onnx", "/abs/cls.onnx"});
  auto bad = ParseCluster("devices:\n  - { name: a, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\nmodels: det.onnx\n",
                          "bad.yaml", {});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("'models' must be a non-empty list") != std::string::npos);
  auto entry = ParseCluster(
      "devices:\n  - { name: a, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\nmodels:\n  - { path: x }\n", "bad.yaml", {});
  REQUIRE_FALSE(entry.ok());
  CHECK(entry.status().message().find("each entry of 'models' is a model file path") != std::string::npos);
  std::filesystem::remove_all(dir);
}

// links.gateway: the cable between the gateway and the devices, over which
// every request's input goes in and its answer comes back (plan_fit.cc
// PriceRequest). Absent: the default link; `none`: the gateway runs on the
// source device; a UART or a list is refused by name.
TEST_CASE("cluster: links.gateway prices the request's trip, default link when absent", "[planner][cluster]") {
  const std::string devices =
      "devices:\n  - { name: a, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\n"
      "  - { name: b, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\n";
  auto absent = ParseCluster(devices + "links:\n  default: { bandwidth: 8Mbit/s, latency: 1ms }\n", "c.yaml", {});
  REQUIRE(absent.ok());
  CHECK(absent->GatewayBytesPerSecond() == Approx(1e6));
  CHECK(absent->GatewaySeconds(500000) == Approx(2e-3 + 0.5));  // two messages' latency + the bytes
  auto own = ParseCluster(devices +
                              "links:\n  default: { bandwidth: 8Mbit/s, latency: 1ms }\n"
                              "  gateway: { bandwidth: 80Mbit/s, latency: 0.5ms }\n",
                          "c.yaml", {});
  REQUIRE(own.ok());
  CHECK(own->GatewaySeconds(500000) == Approx(1e-3 + 0.05));
  auto local = ParseCluster(devices + "links:\n  default: { bandwidth: 8Mbit/s }\n  gateway: none\n", "c.yaml", {});
  REQUIRE(local.ok());
  CHECK(local->GatewaySeconds(500000) == 0.0);
  CHECK(local->GatewayBytesPerSecond() == 0.0);
  // No link at all (one device, no links:): nothing to price.
  auto single = ParseCluster("devices:\n  - { name: a, ram: 1MiB, flash: 1MiB, macs_per_s: 1e6 }\n", "c.yaml", {});
  REQUIRE(single.ok());
  CHECK(single->GatewaySeconds(500000) == 0.0);
  CHECK_THAT(ErrorsOf(devices + "links:\n  default: { bandwidth: 8Mbit/s }\n  gateway: [1Gbit/s]\n"),
             Catch::Contains("bad.yaml:6: links.gateway must be a map") && Catch::Contains("none"));
  CHECK_THAT(ErrorsOf(devices + "links:\n  default: { bandwidth: 8Mbit/s }\n  gateway: { bandwidth: 115200baud }\n"),
             Catch::Contains("links.gateway: the gateway's link is a network, not a UART"));
  CHECK_THAT(ErrorsOf(devices + "links:\n  default: { bandwidth: 8Mbit/s }\n  gateway: { latency: 1ms }\n"),
             Catch::Contains("links.gateway has no bandwidth"));
}
