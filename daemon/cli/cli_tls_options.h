// `--tls-dir DIR`, `--tls-name NAME` and `--insecure`: the options of every
// verb that opens a gRPC channel or server (worker, gateway, deploy, infer),
// and the one place that turns them into a TransportSecurity.
#pragma once

#include <string>

#include "transport/grpc/grpc_channel.h"

namespace CLI {
class App;
}

namespace tessera {

struct TlsOptions {
  std::string dir;        // "" = no TLS
  std::string name;       // identity: DIR/NAME.crt, DIR/NAME.key; "" = the verb's default
  bool insecure = false;  // plaintext off loopback (without --tls-dir)

  // Adds the three options to `cmd`; `name_default` is said in the help
  // (e.g. "the worker's --name").
  void AddTo(CLI::App& cmd, const std::string& name_default, const std::string& insecure_help);
  // Loads the identity `name` (or `fallback_name` when --tls-name was not
  // given) when --tls-dir was; errors name the file at fault.
  Result<TransportSecurity> Resolve(const std::string& fallback_name) const;
};

}  // namespace tessera
