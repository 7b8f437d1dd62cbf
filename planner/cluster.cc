#include "planner/cluster.h"
#include "transport/wire/mcu_program.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "util/quantity.h"

namespace tessera {

namespace fs = std::filesystem;

const char* DeviceKindName(DeviceKind kind) { return kind == DeviceKind::kMcu ? "mcu" : "linux"; }

int Cluster::Find(const std::string& name) const {
  for (int i = 0; i < size(); ++i)
    if (devices[i].name == name) return i;
  return -1;
}

const LinkSpec* Cluster::DirectLink(int a, int b) const {
  auto it = links.find({std::min(a, b), std::max(a, b)});
  if (it != links.end()) return &it->second;
  // An mcu hanging off a linux device is not on the default network.
  const Device& da = devices[a];
  const Device& db = devices[b];
  if ((da.kind == DeviceKind::kMcu && !da.via.empty()) || (db.kind == DeviceKind::kMcu && !db.via.empty()))
    return nullptr;
  return has_default_link ? &default_link : nullptr;
}

double Cluster::GatewayBytesPerSecond() const {
  if (gateway_local) return 0.0;
  if (has_gateway_link) return gateway_link.bytes_per_s;
  return has_default_link ? default_link.bytes_per_s : 0.0;
}

double Cluster::GatewaySeconds(int64_t bytes) const {
  const double rate = GatewayBytesPerSecond();
  if (!(rate > 0)) return 0.0;
  const double latency = has_gateway_link ? gateway_link.latency_s : default_link.latency_s;
  return 2 * latency + static_cast<double>(bytes) / rate;
}

double Cluster::TransferSeconds(int from, int to, int64_t bytes) const {
  if (from == to || bytes <= 0) return 0.0;
  if (const LinkSpec* l = DirectLink(from, to)) return l->latency_s + static_cast<double>(bytes) / l->bytes_per_s;
  // Route through the via device(s): mcu -> via -> ... -> other. The loader
  // guarantees these hops exist.
  const Device& df = devices[from];
  if (df.kind == DeviceKind::kMcu && !df.via.empty()) {
    const int v = Find(df.via);
    if (v >= 0 && v != from) return TransferSeconds(from, v, bytes) + TransferSeconds(v, to, bytes);
  }
  const Device& dt = devices[to];
  if (dt.kind == DeviceKind::kMcu && !dt.via.empty()) {
    const int v = Find(dt.via);
    if (v >= 0 && v != to) return TransferSeconds(from, v, bytes) + TransferSeconds(v, to, bytes);
  }
  return std::numeric_limits<double>::infinity();
}

int Cluster::McuPort(int from, int to) const {
  if (from == to) return 0;
  auto it = links.find({std::min(from, to), std::max(from, to)});
  if (it == links.end()) return 0;
  return from < to ? it->second.mcu_port_low : it->second.mcu_port_high;
}

double Cluster::BytesPerSecond(int from, int to) const {
  const double t = TransferSeconds(from, to, 1 << 20) ;
  return t > 0 ? (1 << 20) / t : std::numeric_limits<double>::infinity();
}

bool Cluster::Homogeneous() const {
  for (const auto& d : devices) {
    const auto& d0 = devices.front();
    if (!d.SameCapacity(d0)) return false;
    if (d.kind == DeviceKind::kMcu && !d.via.empty()) return false;
  }
  return links.empty();
}

std::vector<std::string> PresetDirectories() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TESSERA_SHARED_DIR"); env && *env) candidates.push_back(fs::path(env) / "devices");
#ifdef TESSERA_SOURCE_DIR
  candidates.push_back(fs::path(TESSERA_SOURCE_DIR) / ".." / "shared" / "devices");
  candidates.push_back(fs::path(TESSERA_SOURCE_DIR) / "configs" / "devices");
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "devices");
    candidates.push_back(exe.parent_path() / ".." / "share" / "tessera" / "devices");
    // A build directory inside the repository: <repo>/build-x/tessera.
    candidates.push_back(exe.parent_path() / ".." / ".." / "shared" / "devices");
    candidates.push_back(exe.parent_path() / ".." / "configs" / "devices");
  }
  std::vector<std::string> dirs;
  std::set<std::string> seen;
  for (const auto& c : candidates) {
    if (!fs::is_directory(c, ec)) continue;
    const std::string canon = fs::weakly_canonical(c, ec).string();
    if (seen.insert(canon).second) dirs.push_back(canon);
  }
  return dirs;
}

namespace {

// Collects "file:line: message" lines; the loader reports them all at once.
class ClusterErrors {
 public:
  explicit ClusterErrors(std::string origin) : origin_(std::move(origin)) {}
  void Add(const YAML::Node& at, const std::string& message) { Add(at.Mark(), message); }
  void Add(const YAML::Mark& mark, const std::string& message) {
    std::ostringstream os;
    os << origin_;
    if (mark.line >= 0) os << ":" << mark.line + 1;
    os << ": " << message;
    lines_.push_back(os.str());
  }
  bool empty() const { return lines_.empty(); }
  size_t count() const { return lines_.size(); }
  Status ToStatus() const {
    std::string all;
    for (size_t i = 0; i < lines_.size(); ++i) all += (i ? "\n" : "") + lines_[i];
    return Status::InvalidArgument(all);
  }
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::vector<std::string> lines_;
};

std::string Join(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s;
}

// Checks a map's keys against the allowed ones; one error per unknown or
// repeated key.
void CheckKeys(const YAML::Node& map, const std::vector<std::string>& allowed, const std::string& what,
               ClusterErrors* errors) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      errors->Add(it->first, "unknown key '" + key + "' in " + what + "; allowed keys: " + Join(allowed));
    else if (!seen.insert(key).second)
      errors->Add(it->first, "key '" + key + "' appears twice in " + what + "; keep one");
  }
}

bool IsScalar(const YAML::Node& n) { return n && n.IsScalar(); }

// A device preset: the fields of one entry of a presets file.
struct Preset {
  YAML::Node node;
  std::string file;
};

// The memory/speed/kind fields a preset and a device entry both take
// (ApplyDeviceFields); each adds its own keys.
std::vector<std::string> WithDeviceFields(std::vector<std::string> keys) {
  for (const char* k : {"kind", "ram", "flash", "cpu_hz", "cycles_per_mac", "macs_per_s", "macs_per_s_by_kind",
                        "net_macs_per_byte", "request_macs"})
    keys.emplace_back(k);
  return keys;
}
const std::vector<std::string> kPresetKeys = WithDeviceFields({"name"});
const std::vector<std::string> kDeviceKeys = WithDeviceFields({"name", "preset", "address", "serial", "baud", "via"});

std::map<std::string, Preset> LoadPresets(const std::vector<std::string>& dirs) {
  std::map<std::string, Preset> presets;
  for (const auto& dir : dirs) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".yaml" || e.path().extension() == ".yml") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      YAML::Node root;
      try {
        root = YAML::LoadFile(f.string());
      } catch (const YAML::Exception& e) {
        spdlog::warn("device presets {}: not readable YAML ({}); skipped", f.string(), e.what());
        continue;
      }
      if (!root.IsSequence()) {
        spdlog::warn("device presets {}: expected a list of devices; skipped", f.string());
        continue;
      }
      for (const auto& entry : root) {
        if (!entry.IsMap() || !IsScalar(entry["name"])) continue;
        presets.emplace(entry["name"].Scalar(), Preset{entry, f.string()});  // first directory wins
      }
    }
  }
  return presets;
}

// Applies memory/speed/kind fields of `node` onto `d` (preset first, then
// the device's own entry). `origin` labels errors.
void ApplyDeviceFields(const YAML::Node& node, Device* d, ClusterErrors* errors, const std::string& where) {
  if (const auto k = node["kind"]) {
    if (k.Scalar() == "linux") d->kind = DeviceKind::kLinux;
    else if (k.Scalar() == "mcu") d->kind = DeviceKind::kMcu;
    else errors->Add(k, "device " + where + ": kind '" + k.Scalar() + "' is not linux or mcu; write kind: linux or kind: mcu");
  }
  auto size = [&](const char* key, int64_t* out) {
    if (const auto v = node[key]) {
      auto r = ParseByteSize(v.Scalar());
      if (!r.ok()) errors->Add(v, "device " + where + ": " + key + ": " + r.status().message());
      else if (*r <= 0) errors->Add(v, "device " + where + ": " + key + " must be positive");
      else *out = *r;
    }
  };
  size("ram", &d->ram_bytes);
  size("flash", &d->flash_bytes);
  if (const auto v = node["cpu_hz"]) {
    auto r = ParseFrequency(v.Scalar());
    if (!r.ok()) errors->Add(v, "device " + where + ": cpu_hz: " + r.status().message());
    else d->cpu_hz = *r;
  }
  auto positive_value = [&](const YAML::Node& v, const std::string& key, double* out) {
    char* end = nullptr;
    const std::string text = v.IsScalar() ? v.Scalar() : std::string();
    const double x = std::strtod(text.c_str(), &end);
    if (!v.IsScalar() || end == text.c_str() || *end != '\0' || !(x > 0) || !std::isfinite(x))
      errors->Add(v, "device " + where + ": " + key + " '" + text + "' is not a positive number");
    else
      *out = x;
  };
  auto positive = [&](const char* key, double* out) {
    if (const auto v = node[key]) positive_value(v, key, out);
  };
  positive("cycles_per_mac", &d->cycles_per_mac);
  if (const auto v = node["net_macs_per_byte"]) {  // 0 is allowed: the network stack costs nothing
    char* end = nullptr;
    const std::string text = v.IsScalar() ? v.Scalar() : std::string();
    const double x = std::strtod(text.c_str(), &end);
    if (!v.IsScalar() || end == text.c_str() || *end != '\0' || !(x >= 0) || !std::isfinite(x))
      errors->Add(v, "device " + where + ": net_macs_per_byte '" + text +
                         "' is not a number >= 0 (the CPU one byte sent or received costs, in MACs of this device)");
    else
      d->net_macs_per_byte = x;
  }
  if (const auto v = node["request_macs"]) {  // 0 is allowed: serving a request costs nothing beyond its bytes
    char* end = nullptr;
    const std::string text = v.IsScalar() ? v.Scalar() : std::string();
    const double x = std::strtod(text.c_str(), &end);
    if (!v.IsScalar() || end == text.c_str() || *end != '\0' || !(x >= 0) || !std::isfinite(x))
      errors->Add(v, "device " + where + ": request_macs '" + text +
                         "' is not a number >= 0 (the CPU serving one request costs the source, in MACs of this "
                         "device)");
    else
      d->request_macs = x;
  }
  // A bad macs_per_s is reported here; NaN keeps RequireSpeedAndMemory from
  // adding a second line ("has no speed") about the same mistake.
  if (node["macs_per_s"]) {
    double macs = std::numeric_limits<double>::quiet_NaN();
    positive("macs_per_s", &macs);
    d->macs_per_s = macs;
  }
  if (const auto by_kind = node["macs_per_s_by_kind"]) {
    if (!by_kind.IsMap()) {
      errors->Add(by_kind,
                  "device " + where + ": macs_per_s_by_kind must be a map, e.g. { conv: 9e9, depthwise: 1.5e9 }");
      return;
    }
    std::string kinds;
    for (int k = 1; k < kOpKinds; ++k) kinds += std::string(k > 1 ? ", " : "") + OpKindName(static_cast<OpKind>(k));
    for (auto it = by_kind.begin(); it != by_kind.end(); ++it) {
      const std::string name = it->first.Scalar();
      OpKind kind;
      if (!ParseOpKind(name, &kind)) {
        errors->Add(it->first,
                    "device " + where + ": macs_per_s_by_kind: unknown op kind '" + name + "'; known: " + kinds);
        continue;
      }
      double x = 0;
      positive_value(it->second, "macs_per_s_by_kind." + name, &x);
      if (x > 0) d->kind_macs_per_s[static_cast<int>(kind)] = x;
    }
  }
}

// Presets are read when the first device names one, so a file that uses
// none reads no preset directory (and logs none of its warnings).
class PresetCatalog {
 public:
  explicit PresetCatalog(const std::vector<std::string>& dirs) : dirs_(dirs) {}
  const std::map<std::string, Preset>& presets() {
    if (!loaded_) {
      presets_ = LoadPresets(dirs_);
      loaded_ = true;
    }
    return presets_;
  }

 private:
  const std::vector<std::string>& dirs_;
  std::map<std::string, Preset> presets_;
  bool loaded_ = false;
};

// Parses the text and checks the top-level keys. False when there is no
// cluster to read further (the error is in `errors`).
bool LoadClusterRoot(const std::string& yaml_text, YAML::Node* root, ClusterErrors* errors) {
  try {
    *root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    errors->Add(e.mark, "not valid YAML: " + e.msg + "; check indentation and brackets near this line");
    return false;
  }
  if (!root->IsMap()) {
    errors->Add(*root, "a cluster file is a map with keys 'devices' and 'links'");
    return false;
  }
  CheckKeys(*root, {"devices", "links", "models"}, "the cluster file", errors);
  return true;
}

// Applies the preset named by `p` to `d`; errors inside the preset file are
// reported at `p`, each naming its own file and line.
void ApplyPreset(const YAML::Node& p, PresetCatalog* catalog, Device* d, ClusterErrors* errors) {
  const std::map<std::string, Preset>& presets = catalog->presets();
  auto it = presets.find(p.Scalar());
  if (it == presets.end()) {
    std::vector<std::string> names;
    for (const auto& [n, _] : presets) names.push_back(n);
    errors->Add(p, "unknown preset '" + p.Scalar() + "'; known presets: " +
                       (names.empty() ? std::string("none (no preset directory found; set TESSERA_SHARED_DIR)")
                                      : Join(names)));
  } else {
    d->preset = p.Scalar();
    ClusterErrors preset_errors(it->second.file);
    CheckKeys(it->second.node, kPresetKeys, "preset " + d->preset, &preset_errors);
    ApplyDeviceFields(it->second.node, d, &preset_errors, "preset " + d->preset);
    if (!preset_errors.empty()) errors->Add(p, preset_errors.ToStatus().message());
  }
}

// Speed, RAM and flash must come from the preset or the entry; macs_per_s
// may be derived from cpu_hz and cycles_per_mac.
void RequireSpeedAndMemory(const YAML::Node& dn, Device* d, ClusterErrors* errors) {
  if (d->macs_per_s <= 0) {
    if (d->cpu_hz > 0 && d->cycles_per_mac > 0) d->macs_per_s = d->cpu_hz / d->cycles_per_mac;
    else if (std::any_of(d->kind_macs_per_s.begin(), d->kind_macs_per_s.end(), [](double r) { return r > 0; }))
      errors->Add(
          dn, "device " + d->name + " has macs_per_s_by_kind but no macs_per_s for the other kinds; add macs_per_s");
    else if (!d->preset.empty())
      errors->Add(dn, "device " + d->name + " has no speed (preset " + d->preset +
                          " gives none); add macs_per_s measured on the board (tessera calibrate), or cpu_hz and "
                          "cycles_per_mac");
    else
      errors->Add(dn, "device " + d->name + " has no speed; add cpu_hz and cycles_per_mac, or macs_per_s, or a preset");
  }
  if (d->ram_bytes <= 0) errors->Add(dn, "device " + d->name + " has no ram; add e.g. ram: 512KiB, or a preset");
  if (d->flash_bytes <= 0) errors->Add(dn, "device " + d->name + " has no flash; add e.g. flash: 2MiB, or a preset");
}

// An MCU's ram/flash (its preset's, or the entry's) are the board's; the
// tessera firmware takes its share first (mcu_program.h kFirmwareRamBytes,
// kFirmwareFlashBytes: static link state, frame buffers and stack; code),
// and the plan gets the rest. So a program the planner fits on a preset fits
// the board with the firmware on it.
void ReserveFirmware(const YAML::Node& dn, Device* d, ClusterErrors* errors) {
  const int64_t ram = mcu::kFirmwareRamBytes, flash = mcu::kFirmwareFlashBytes;
  auto reserve = [&](const char* what, int64_t need, int64_t* bytes) {
    if (*bytes <= 0 || *bytes == kUnlimitedBytes) return;
    if (*bytes <= need)
      errors->Add(dn, "device " + d->name + ": " + what + " " + FormatBytes(*bytes) +
                          " leaves nothing for a program: the tessera MCU firmware itself takes " + FormatBytes(need) +
                          " of " + what);
    else
      *bytes -= need;
  };
  reserve("ram", ram, &d->ram_bytes);
  reserve("flash", flash, &d->flash_bytes);
}

// How the device is reached: its gRPC address, and for an mcu its serial
// port, baud rate and the linux device it hangs off (`via`).
void ParseDeviceConnection(const YAML::Node& dn, Device* d, ClusterErrors* errors) {
  if (const auto a = dn["address"]) {
    d->address = a.Scalar();
    const auto colon = d->address.rfind(':');
    if (colon == std::string::npos || colon + 1 == d->address.size() ||
        d->address.find_first_not_of("0123456789", colon + 1) != std::string::npos)
      errors->Add(a, "device " + d->name + ": address '" + d->address +
                         "' needs a port; write host:port, e.g. 10.0.0.11:7070");
    // An mcu's address is where its via worker serves it over gRPC
    // (`tessera worker --mcu NAME=PORT@BAUD,listen=ADDR`); its traffic
    // still crosses the UART, so its links stay routed through `via`.
  }
  if (const auto s = dn["serial"]) d->serial = s.Scalar();
  if (const auto b = dn["baud"]) {
    std::string text = b.Scalar();
    if (text.find("baud") == std::string::npos) text += "baud";
    auto bw = ParseBandwidth(text);
    if (!bw.ok()) errors->Add(b, "device " + d->name + ": baud: " + bw.status().message());
    else d->baud = static_cast<int64_t>(std::llround(bw->bytes_per_s * 10));
  }
  if (const auto v = dn["via"]) d->via = v.Scalar();
  if (d->kind == DeviceKind::kLinux && (!d->via.empty() || !d->serial.empty()))
    errors->Add(dn, "device " + d->name + " is linux but has serial/via; write kind: mcu or remove them");
}

// One entry of 'devices'; nullopt when it has no usable name (the error is
// in `errors`). Fields come from its preset first, then from the entry.
std::optional<Device> ParseDeviceEntry(const YAML::Node& dn, const Cluster& cluster, PresetCatalog* catalog,
                                       ClusterErrors* errors) {
  if (!dn.IsMap()) {
    errors->Add(dn, "a device must be a map (name: ..., ram: ..., ...)");
    return std::nullopt;
  }
  CheckKeys(dn, kDeviceKeys, "a device", errors);
  Device d;
  if (!IsScalar(dn["name"]) || dn["name"].Scalar().empty()) {
    errors->Add(dn, "device without a name; add name: <unique name>");
    return std::nullopt;
  }
  d.name = dn["name"].Scalar();
  if (cluster.Find(d.name) >= 0) {
    errors->Add(dn["name"], "duplicate device name '" + d.name + "'; device names must be unique");
    return std::nullopt;
  }
  d.ram_bytes = d.flash_bytes = 0;  // required: from preset or entry
  if (dn["serial"]) d.kind = DeviceKind::kMcu;
  if (const auto p = dn["preset"]) ApplyPreset(p, catalog, &d, errors);
  ApplyDeviceFields(dn, &d, errors, d.name);
  RequireSpeedAndMemory(dn, &d, errors);
  if (d.kind == DeviceKind::kMcu) ReserveFirmware(dn, &d, errors);
  ParseDeviceConnection(dn, &d, errors);
  return d;
}

// `via` must name a linux device; it also makes the UART link.
void AddViaLinks(const std::vector<YAML::Node>& device_nodes, Cluster* cluster, ClusterErrors* errors) {
  for (size_t i = 0; i < cluster->devices.size(); ++i) {
    const Device& d = cluster->devices[i];
    if (d.via.empty()) continue;
    const int v = cluster->Find(d.via);
    if (v < 0) {
      errors->Add(device_nodes[i]["via"], "device " + d.name + ": via '" + d.via + "' is not a device in this file");
    } else if (cluster->devices[v].kind != DeviceKind::kLinux) {
      errors->Add(device_nodes[i]["via"], "device " + d.name + ": via '" + d.via + "' must be a linux device");
    } else if (d.baud > 0) {
      LinkSpec uart;
      uart.bytes_per_s = d.baud / 10.0;
      uart.uart = true;
      cluster->links[{std::min<int>(i, v), std::max<int>(i, v)}] = uart;
    }
  }
}

// Bandwidth (required) and latency of one link entry; `what` labels errors.
void ParseLinkSpec(const YAML::Node& n, const std::vector<std::string>& allowed, const std::string& what,
                   LinkSpec* out, ClusterErrors* errors) {
  CheckKeys(n, allowed, what, errors);
  if (!n["bandwidth"]) {
    errors->Add(n, what + " has no bandwidth; add e.g. bandwidth: 1Gbit/s");
  } else {
    auto bw = ParseBandwidth(n["bandwidth"].Scalar());
    if (!bw.ok()) errors->Add(n["bandwidth"], what + ": " + bw.status().message());
    else {
      out->bytes_per_s = bw->bytes_per_s;
      out->uart = bw->uart;
    }
  }
  if (const auto l = n["latency"]) {
    auto lat = ParseDuration(l.Scalar());
    if (!lat.ok()) errors->Add(l, what + ": " + lat.status().message());
    else out->latency_s = *lat;
  }
}

// A pair of MCUs is a direct UART-to-UART link (issue 16 item 4): its
// bandwidth is in baud, and each end takes a UART (1..kMaxMcuLinkPort):
// `ports: [pa, pb]` in the order of `between`, else the next free one of
// each MCU. `used` holds the ports taken so far per device.
void AssignMcuPorts(const YAML::Node& p, const std::string& what, int a, int b, std::map<int, std::set<int>>* used,
                    LinkSpec* link, ClusterErrors* errors) {
  if (!link->uart && link->bytes_per_s > 0)
    errors->Add(p["bandwidth"], what + " joins two MCUs UART-to-UART; give its bandwidth in baud, e.g. 115200baud");
  int port[2] = {0, 0};
  const int dev[2] = {a, b};
  if (const auto ports = p["ports"]) {
    if (!ports.IsSequence() || ports.size() != 2) {
      errors->Add(ports, what + ": ports is [port of the first, port of the second], e.g. [1, 1]");
      return;
    }
    for (int k = 0; k < 2; ++k) {
      int v = 0;
      if (!YAML::convert<int>::decode(ports[k], v) || v < 1 || v > kMaxMcuLinkPort) {
        errors->Add(ports[k], what + ": port '" + ports[k].Scalar() +
                                  "' is not a UART an MCU can give a direct link (1.." +
                                  std::to_string(kMaxMcuLinkPort) + "; UART0 is the one to its via device)");
        return;
      }
      port[k] = v;
    }
  } else {
    for (int k = 0; k < 2; ++k) {
      for (int v = 1; v <= kMaxMcuLinkPort && port[k] == 0; ++v)
        if (!(*used)[dev[k]].count(v)) port[k] = v;
      if (port[k] == 0) {
        errors->Add(p, what + ": every UART of " + std::to_string(kMaxMcuLinkPort) +
                           " for direct links of that MCU is taken; an MCU joins at most " +
                           std::to_string(kMaxMcuLinkPort) + " others");
        return;
      }
    }
  }
  for (int k = 0; k < 2; ++k)
    if (!(*used)[dev[k]].insert(port[k]).second) {
      errors->Add(p, what + ": UART" + std::to_string(port[k]) + " of that MCU already joins another MCU");
      return;
    }
  link->mcu_port_low = a < b ? port[0] : port[1];
  link->mcu_port_high = a < b ? port[1] : port[0];
}

// links.pairs: one direct link per pair of devices; it replaces the UART
// link that baud/via made for that pair.
void ParseLinkPairs(const YAML::Node& pairs, Cluster* cluster, ClusterErrors* errors) {
  std::set<std::pair<int, int>> explicit_pairs;
  std::map<int, std::set<int>> used_ports;  // per MCU: its UARTs joined to another MCU
  for (const auto& p : pairs) {
    if (!p.IsMap()) {
      errors->Add(p, "a link must be a map { between: [a, b], bandwidth: ..., latency: ... }");
      continue;
    }
    const auto between = p["between"];
    if (!between || !between.IsSequence() || between.size() != 2) {
      errors->Add(p, "a link needs between: [device, device]");
      continue;
    }
    const int a = cluster->Find(between[0].Scalar());
    const int b = cluster->Find(between[1].Scalar());
    for (int k = 0; k < 2; ++k)
      if ((k == 0 ? a : b) < 0)
        errors->Add(between[k], "link names device '" + between[k].Scalar() + "', which is not in 'devices'");
    if (a < 0 || b < 0) continue;
    if (a == b) {
      errors->Add(between, "a link joins two different devices, not '" + between[0].Scalar() + "' with itself");
      continue;
    }
    const std::string what = "link " + between[0].Scalar() + "-" + between[1].Scalar();
    LinkSpec link;
    ParseLinkSpec(p, {"between", "bandwidth", "latency", "ports"}, what, &link, errors);
    auto key = std::make_pair(std::min(a, b), std::max(a, b));
    if (!explicit_pairs.insert(key).second) {
      errors->Add(p, what + " is given twice; keep one entry per pair");
      continue;
    }
    const bool mcus = cluster->devices[a].kind == DeviceKind::kMcu && cluster->devices[b].kind == DeviceKind::kMcu;
    if (mcus)
      AssignMcuPorts(p, what, a, b, &used_ports, &link, errors);
    else if (p["ports"])
      errors->Add(p["ports"],
                  what + ": ports name the UARTs of two MCUs joined directly; " + "this link does not join two MCUs");
    cluster->links[key] = link;  // overrides the link made by baud/via
  }
}

// The 'links' map: a default link for every pair, and explicit pairs.
void ParseLinks(const YAML::Node& links, Cluster* cluster, ClusterErrors* errors) {
  if (!links.IsMap()) {
    errors->Add(links, "'links' must be a map with 'default', 'pairs' and/or 'gateway'");
    return;
  }
  CheckKeys(links, {"default", "pairs", "gateway"}, "links", errors);
  if (const auto gw = links["gateway"]) {
    if (gw.IsScalar() && gw.Scalar() == "none") {
      cluster->has_gateway_link = true;
      cluster->gateway_local = true;
    } else if (!gw.IsMap()) {
      errors->Add(gw,
                  "links.gateway must be a map, e.g. { bandwidth: 1Gbit/s, latency: 0.2ms }, or none (the "
                  "gateway runs on the source device)");
    } else {
      ParseLinkSpec(gw, {"bandwidth", "latency"}, "links.gateway", &cluster->gateway_link, errors);
      if (cluster->gateway_link.uart)
        errors->Add(gw["bandwidth"], "links.gateway: the gateway's link is a network, not a UART (baud)");
      cluster->has_gateway_link = true;
    }
  }
  if (const auto def = links["default"]) {
    if (!def.IsMap()) errors->Add(def, "links.default must be a map, e.g. { bandwidth: 1Gbit/s, latency: 0.2ms }");
    else {
      ParseLinkSpec(def, {"bandwidth", "latency"}, "links.default", &cluster->default_link, errors);
      cluster->has_default_link = true;
    }
  }
  if (const auto pairs = links["pairs"]) {
    if (!pairs.IsSequence()) errors->Add(pairs, "links.pairs must be a list of { between: [a, b], bandwidth: ... }");
    else ParseLinkPairs(pairs, cluster, errors);
  }
}

// Every pair must be reachable: a direct link, the default, or via hops.
// Missing pairs are reported at `at` (the links map, or the file), ten at most.
void CheckEveryPairLinked(const Cluster& cluster, const YAML::Node& at, ClusterErrors* errors) {
  int missing = 0;
  for (int a = 0; a < cluster.size(); ++a)
    for (int b = a + 1; b < cluster.size(); ++b) {
      if (std::isfinite(cluster.TransferSeconds(a, b, 1))) continue;
      if (++missing > 10) continue;
      const Device& da = cluster.devices[a];
      const Device& db = cluster.devices[b];
      std::string fix = "add links: default: { bandwidth: 1Gbit/s } or a pair { between: [" + da.name + ", " +
                        db.name + "], bandwidth: ... }";
      if (da.kind == DeviceKind::kMcu && da.via.empty()) fix += ", or give " + da.name + " via: and baud:";
      if (db.kind == DeviceKind::kMcu && db.via.empty()) fix += ", or give " + db.name + " via: and baud:";
      errors->Add(at, "no link between " + da.name + " and " + db.name + "; " + fix);
    }
}

}  // namespace

Result<Cluster> ParseCluster(const std::string& yaml_text, const std::string& origin,
                             const std::vector<std::string>& preset_dirs) {
  ClusterErrors errors(origin);
  YAML::Node root;
  if (!LoadClusterRoot(yaml_text, &root, &errors)) return errors.ToStatus();
  const YAML::Node devs = root["devices"];
  if (!devs || !devs.IsSequence() || devs.size() == 0) {
    errors.Add(devs ? devs : root, "'devices' must be a non-empty list of devices (- name: pi1 ...)");
    return errors.ToStatus();
  }

  PresetCatalog catalog(preset_dirs);
  Cluster cluster;
  cluster.origin = origin;
  std::vector<YAML::Node> device_nodes;
  for (const auto& dn : devs) {
    std::optional<Device> d = ParseDeviceEntry(dn, cluster, &catalog, &errors);
    if (!d) continue;
    cluster.devices.push_back(*d);
    device_nodes.push_back(dn);
  }
  AddViaLinks(device_nodes, &cluster, &errors);
  if (const YAML::Node links = root["links"]) ParseLinks(links, &cluster, &errors);
  if (errors.empty()) CheckEveryPairLinked(cluster, root["links"] ? root["links"] : root, &errors);
  if (const YAML::Node models = root["models"]) {
    if (!models.IsSequence() || models.size() == 0)
      errors.Add(models, "'models' must be a non-empty list of model files (- detector.onnx)");
    else
      for (const auto& m : models) {
        if (!m.IsScalar() || m.Scalar().empty())
          errors.Add(m, "each entry of 'models' is a model file path (.onnx or darknet .cfg)");
        else
          cluster.models.push_back(m.Scalar());
      }
  }
  if (!errors.empty()) return errors.ToStatus();
  return cluster;
}

Result<Cluster> LoadClusterFile(const std::string& path, std::vector<std::string> preset_dirs) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cluster file " + path + " cannot be opened; check the path given to --cluster");
  std::stringstream text;
  text << in.rdbuf();
  if (preset_dirs.empty()) {
    preset_dirs = PresetDirectories();
    std::error_code ec;
    const fs::path local = fs::path(path).parent_path() / "devices";
    if (fs::is_directory(local, ec)) preset_dirs.push_back(local.string());
  }
  auto cluster = ParseCluster(text.str(), path, preset_dirs);
  if (!cluster.ok()) return cluster;
  for (std::string& m : cluster->models)
    if (fs::path(m).is_relative()) m = (fs::path(path).parent_path() / m).lexically_normal().string();
  return cluster;
}

Cluster UniformCluster(int n) {
  Cluster c;
  c.origin = "--devices " + std::to_string(n);
  for (int i = 0; i < n; ++i) {
    Device d;
    d.name = "dev" + std::to_string(i + 1);
    d.kind = DeviceKind::kLinux;
    d.cpu_hz = 1.5e9;
    d.cycles_per_mac = 0.4;
    d.macs_per_s = d.cpu_hz / d.cycles_per_mac;
    c.devices.push_back(d);
  }
  c.has_default_link = true;
  c.default_link.bytes_per_s = 1e9 / 8;
  c.default_link.latency_s = 0.2e-3;
  return c;
}

}  // namespace tessera
