// The cluster's certificate authority and the device identities it signs
// (ARCHITECTURE.md "Trust and memory": off loopback every gRPC connection is
// mutual TLS under one cluster CA; a device's name is its certificate's name).
//
// A TLS directory holds, as PEM files:
//   ca.crt, ca.key       the cluster CA (`tessera certs init`); ca.key stays on
//                        the machine that issues certificates
//   NAME.crt, NAME.key   one per process identity (`tessera certs issue`):
//                        a worker's --name, "gateway", "deploy", "infer"
// Keys are EC P-256, written with mode 0600; certificates are mode 0644.
// Only OpenSSL's libcrypto is used here; gRPC reads the same PEM files
// (transport/grpc/grpc_channel.h).
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace tessera {

inline constexpr const char* kCaCertFile = "ca.crt";
inline constexpr const char* kCaKeyFile = "ca.key";

struct CaOptions {
  std::string dir;
  std::string common_name = "tessera cluster CA";
  int days = 3650;     // ten years: a lab cluster outlives a device certificate
  bool force = false;  // overwrite an existing ca.crt / ca.key
};

struct IssueOptions {
  std::string dir;   // holds ca.crt and ca.key; NAME.crt and NAME.key are written here
  std::string name;  // device or process name: subject CN and first DNS subjectAltName
  // Further subjectAltNames: IPv4/IPv6 addresses become IP entries, anything
  // else a DNS entry. Empty = {"127.0.0.1", "localhost"}.
  std::vector<std::string> hosts;
  int days = 825;      // a little over two years
  bool force = false;  // overwrite an existing NAME.crt / NAME.key
};

// Makes a self-signed CA (basicConstraints CA:TRUE, keyCertSign) in
// options.dir (created if missing). Fails, writing nothing, when either file
// exists and !force, naming it.
Status CreateClusterCa(const CaOptions& options);

// Makes NAME.key and NAME.crt signed by the CA in options.dir (serverAuth
// and clientAuth: every process is both). Fails, writing nothing, when the
// CA is missing or its key does not match its certificate (naming the file),
// when NAME is not a plain name ([A-Za-z0-9][A-Za-z0-9._-]*, at most 64,
// not "ca"), when a host is empty or malformed, or when NAME.* exist and
// !force.
Status IssueDeviceCertificate(const IssueOptions& options);

// What a process presents and trusts: the PEM text gRPC takes.
struct TlsIdentity {
  std::string dir, name;  // where it came from, for messages
  std::string ca_pem, cert_pem, key_pem;
};

// Reads DIR/ca.crt, DIR/NAME.crt and DIR/NAME.key and checks, before any
// connection is tried, what gRPC would otherwise report as a bare handshake
// failure: each file exists and parses, the key is NAME.crt's, NAME.crt is
// signed by ca.crt and is valid now. Each error names the file at fault.
Result<TlsIdentity> LoadTlsIdentity(const std::string& dir, const std::string& name);

// OK when cert_pem verifies against ca_pem as its only trust anchor (chain,
// signature, validity period); otherwise the verifier's reason.
Status VerifyIssuedBy(const std::string& ca_pem, const std::string& cert_pem);

// The certificate's subjectAltNames as "DNS:name" / "IP:1.2.3.4", in order.
Result<std::vector<std::string>> SubjectAltNames(const std::string& cert_pem);

}  // namespace tessera
