// `tessera certs init --dir DIR` and `tessera certs issue --dir DIR --name
// NAME [--host ADDR]...`: the cluster CA and the certificates every process
// presents with --tls-dir (transport/tls/cluster_ca.h).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "transport/tls/cluster_ca.h"

namespace tessera {

void RegisterCertsCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("certs", "Make the cluster CA and the certificates for --tls-dir");
  cmd->require_subcommand(1);

  auto* init = cmd->add_subcommand("init", "Make the cluster CA: DIR/ca.crt and DIR/ca.key (EC P-256)");
  auto ca = std::make_shared<CaOptions>();
  init->add_option("--dir", ca->dir, "Directory of the CA (created if missing)")->required();
  init->add_option("--days", ca->days, "Validity in days")->capture_default_str()->check(CLI::Range(1, 36500));
  init->add_flag("--force", ca->force, "Replace an existing CA (every certificate it signed stops being trusted)");
  init->callback([ca] {
    if (Status st = CreateClusterCa(*ca); !st.ok()) throw CLI::RuntimeError(ReportError("certs init", st));
    std::printf("cluster CA written: %s/%s, %s/%s (keep the key on this machine)\n", ca->dir.c_str(), kCaCertFile,
                ca->dir.c_str(), kCaKeyFile);
  });

  auto* issue = cmd->add_subcommand("issue", "Make NAME.key and NAME.crt signed by the CA in DIR");
  auto io = std::make_shared<IssueOptions>();
  issue->add_option("--dir", io->dir, "Directory of the CA; the key and certificate are written here")->required();
  issue->add_option("--name", io->name, "Device or process name (a worker's --name, gateway, deploy, infer)")
      ->required();
  issue->add_option("--host", io->hosts,
                    "Address or DNS name peers use to reach it (subjectAltName; repeatable; default 127.0.0.1 and "
                    "localhost)");
  issue->add_option("--days", io->days, "Validity in days")->capture_default_str()->check(CLI::Range(1, 36500));
  issue->add_flag("--force", io->force, "Replace an existing NAME.crt / NAME.key");
  issue->callback([io] {
    if (Status st = IssueDeviceCertificate(*io); !st.ok()) throw CLI::RuntimeError(ReportError("certs issue", st));
    std::printf("%s/%s.crt and %s/%s.key written\n", io->dir.c_str(), io->name.c_str(), io->dir.c_str(),
                io->name.c_str());
  });
}

}  // namespace tessera
