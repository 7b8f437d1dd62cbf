#include "daemon/cli/cli_tls_options.h"

#include <CLI/CLI.hpp>

namespace tessera {

void TlsOptions::AddTo(CLI::App& cmd, const std::string& name_default, const std::string& insecure_help) {
  cmd.add_option("--tls-dir", dir,
                 "Mutual TLS under the cluster CA: DIR holds ca.crt, NAME.crt and NAME.key (tessera certs); "
                 "plaintext is then never used");
  cmd.add_option("--tls-name", name, "NAME of this process's certificate in --tls-dir (default: " + name_default + ")");
  cmd.add_flag("--insecure", insecure, insecure_help);
}

Result<TransportSecurity> TlsOptions::Resolve(const std::string& fallback_name) const {
  if (dir.empty() && !name.empty()) return Status::InvalidArgument("--tls-name needs --tls-dir");
  return MakeTransportSecurity(dir, name.empty() ? fallback_name : name, insecure);
}

}  // namespace tessera
