#include "transport/grpc/grpc_channel.h"

#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "util/limits.h"

namespace tessera {

bool IsLoopbackAddress(const std::string& address) {
  std::string host = address;
  if (!host.empty() && host[0] == '[') {  // [::1]:7070
    host = host.substr(1, host.find(']') == std::string::npos ? std::string::npos : host.find(']') - 1);
  } else if (auto colon = host.rfind(':'); colon != std::string::npos && host.find(':') == colon) {
    host = host.substr(0, colon);
  }
  if (host.rfind("ipv4:", 0) == 0) host = host.substr(5);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

Result<TransportSecurity> MakeTransportSecurity(const std::string& tls_dir, const std::string& tls_name,
                                                bool insecure) {
  TransportSecurity security;
  security.allow_plaintext_remote = insecure;
  if (tls_dir.empty()) return security;
  TS_ASSIGN_OR_RETURN(TlsIdentity id, LoadTlsIdentity(tls_dir, tls_name));
  security.tls = std::make_shared<const TlsIdentity>(std::move(id));
  return security;
}

void ConfigureServer(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder->SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, kGrpcHandshakeTimeoutMs);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
}

Result<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address, const TransportSecurity& security) {
  if (!security.tls && !IsLoopbackAddress(address) && !security.allow_plaintext_remote)
    return Status::FailedPrecondition("refusing a plaintext gRPC channel to " + address +
                                      ": only loopback addresses may be plaintext; pass --tls-dir DIR for mutual "
                                      "TLS, or --insecure to allow plaintext on a trusted network");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  // Each caller gets its own TCP connection (peer exchange streams must not
  // queue behind large Run requests on a shared one).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A restarted worker must be seen again within about a second: gRPC's
  // default reconnect backoff grows to two minutes, far longer than a board
  // takes to reboot, and calls fail fast while a channel backs off.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Fixed receive windows, as on servers (ConfigureServer says why).
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  if (!security.tls) return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  // gRPC checks the server's chain against ca.crt and the host part of
  // `address` against its subjectAltNames; the server checks ours.
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = security.tls->ca_pem;
  tls.pem_private_key = security.tls->key_pem;
  tls.pem_cert_chain = security.tls->cert_pem;
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(tls), args);
}

Result<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(const std::string& listen_address,
                                                                      const TransportSecurity& security) {
  if (security.tls) {
    // A peer without a certificate, or with one the cluster CA did not sign,
    // fails the handshake: no RPC of any service is reached.
    grpc::SslServerCredentialsOptions tls(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    tls.pem_root_certs = security.tls->ca_pem;
    tls.pem_key_cert_pairs.push_back({security.tls->key_pem, security.tls->cert_pem});
    return grpc::SslServerCredentials(tls);
  }
  if (!IsLoopbackAddress(listen_address) && !security.allow_plaintext_remote)
    return Status::FailedPrecondition("refusing to listen in plaintext on " + listen_address +
                                      ": use a loopback address, pass --tls-dir DIR for mutual TLS, or pass "
                                      "--insecure on a trusted network");
  return grpc::InsecureServerCredentials();
}

namespace {

// Why `channel` has no connection, from a call made without waiting for one
// (the channel's state says no more than TRANSIENT_FAILURE).
std::string ConnectFailureReason(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::ByteBuffer reply;
  grpc::GenericStub stub(channel);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status st;
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);  // an empty ByteBuffer is no message at all
  stub.UnaryCall(&ctx, "/tessera.ConnectProbe/Connect", grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    st = std::move(s);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return st.error_message().empty() ? "no connection" : st.error_message();
}

// The peer took the TCP connection and then refused the session: a
// plaintext client at a TLS server sees the socket closed, a certificate
// the other side does not accept fails the handshake. A peer that is not
// listening yet refuses the connection instead ("Connection refused").
bool PeerRefusedSession(const std::string& reason) {
  for (const char* sign : {"Socket closed", "andshake", "SSL", "Ssl", "ssl", "TSI", "certificate"})
    if (reason.find(sign) != std::string::npos) return true;
  return false;
}

}  // namespace

Status WaitUntilConnected(const std::shared_ptr<grpc::Channel>& channel, const std::string& address,
                          const TransportSecurity& security, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::system_clock::now() + timeout;
  // Waiting longer cannot mend a refused session (another CA, plaintext at
  // a TLS peer): after kRefusals of them in a row, a quarter second apart,
  // this answers at once instead of at the deadline (10 s for deploy and
  // infer). One refusal alone is not enough: a worker that is restarting
  // may close a socket once before it listens again.
  constexpr int kRefusals = 3;
  int refusals = 0;
  std::string reason = "no connection";
  for (;;) {
    const auto slice = std::min(deadline, std::chrono::system_clock::now() + std::chrono::milliseconds(250));
    if (channel->WaitForConnected(slice)) return Status::OK();
    const bool expired = std::chrono::system_clock::now() >= deadline;
    if (channel->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE || expired) {
      reason = ConnectFailureReason(channel);
      refusals = PeerRefusedSession(reason) ? refusals + 1 : 0;
    }
    if (expired || refusals >= kRefusals) break;
  }
  const std::string hint =
      security.tls ? "with TLS identity " + security.tls->name + " from " + security.tls->dir +
                         ": check that the peer has --tls-dir, that the same cluster CA signed both certificates, "
                         "and that its certificate names the host of " + address + " (tessera certs issue --host)"
                   : "in plaintext: if the peer has --tls-dir, pass --tls-dir here too";
  if (refusals >= kRefusals)
    return Status::Unavailable(address + " took the connection but refused the session " + hint + " (" + reason + ")");
  return Status::Unavailable("cannot connect to " + address + " within " + std::to_string(timeout.count() / 1000) +
                             " s " + hint + " (" + reason + ")");
}

std::string DescribePeer(const grpc::ServerContext& context) {
  const std::string address = context.peer();
  const auto auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return address;
  const std::vector<grpc::string_ref> names = auth->GetPeerIdentity();
  if (names.empty()) return address;
  return std::string(names.front().data(), names.front().size()) + " (" + address + ")";
}

std::vector<std::string> PeerCertificateNames(const grpc::ServerContext& context) {
  std::vector<std::string> names;
  const auto auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return names;
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME})
    for (const grpc::string_ref& v : auth->FindPropertyValues(property)) names.emplace_back(v.data(), v.size());
  return names;
}

bool PeerIs(const std::vector<std::string>& peer_names, const std::string& name) {
  return !name.empty() && std::find(peer_names.begin(), peer_names.end(), name) != peer_names.end();
}

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
    case StatusCode::kOk: code = grpc::StatusCode::OK; break;
    case StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kNotSupported: code = grpc::StatusCode::UNIMPLEMENTED; break;
    case StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case StatusCode::kResourceExhausted: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case StatusCode::kDeadlineExceeded: code = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case StatusCode::kDataLoss: code = grpc::StatusCode::DATA_LOSS; break;
    case StatusCode::kInternal: code = grpc::StatusCode::INTERNAL; break;
    case StatusCode::kIOError: code = grpc::StatusCode::INTERNAL; break;
    case StatusCode::kPermissionDenied: code = grpc::StatusCode::PERMISSION_DENIED; break;
    case StatusCode::kAlreadyExists: code = grpc::StatusCode::ALREADY_EXISTS; break;
    case StatusCode::kUnauthenticated: code = grpc::StatusCode::UNAUTHENTICATED; break;
  }
  return grpc::Status(code, status.message());
}

Status FromGrpcStatus(const grpc::Status& status, const std::string& context) {
  if (status.ok()) return Status::OK();
  std::string m = context.empty() ? status.error_message() : context + ": " + status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT: return Status::InvalidArgument(m);
    case grpc::StatusCode::UNIMPLEMENTED: return Status::NotSupported(m);
    case grpc::StatusCode::NOT_FOUND: return Status::NotFound(m);
    case grpc::StatusCode::FAILED_PRECONDITION: return Status::FailedPrecondition(m);
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return Status::ResourceExhausted(m);
    case grpc::StatusCode::UNAVAILABLE: return Status::Unavailable(m);
    case grpc::StatusCode::DEADLINE_EXCEEDED: return Status::DeadlineExceeded(m);
    case grpc::StatusCode::DATA_LOSS: return Status::DataLoss(m);
    case grpc::StatusCode::PERMISSION_DENIED: return Status::PermissionDenied(m);
    case grpc::StatusCode::ALREADY_EXISTS: return Status::AlreadyExists(m);
    case grpc::StatusCode::UNAUTHENTICATED: return Status::Unauthenticated(m);
    default: return Status::Internal(m);
  }
}

int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::chrono::system_clock::time_point DeadlineFromUnixMillis(int64_t unix_ms) {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(unix_ms));
}

}  // namespace tessera
