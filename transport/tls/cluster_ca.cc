#include "transport/tls/cluster_ca.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

namespace tessera {

namespace fs = std::filesystem;

namespace {

template <typename T, void (*Free)(T*)>
struct OpenSslDeleter {
  void operator()(T* p) const { Free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509, X509_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO, BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, OpenSslDeleter<BIGNUM, BN_free>>;
using StorePtr = std::unique_ptr<X509_STORE, OpenSslDeleter<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, OpenSslDeleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, OpenSslDeleter<X509_EXTENSION, X509_EXTENSION_free>>;
void FreeGeneralNames(GENERAL_NAMES* names) { GENERAL_NAMES_free(names); }
using NamesPtr = std::unique_ptr<GENERAL_NAMES, OpenSslDeleter<GENERAL_NAMES, FreeGeneralNames>>;

// OpenSSL's error queue as one line (and emptied), after `what`.
Status OpenSslError(const std::string& what) {
  std::string reasons;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    reasons += reasons.empty() ? buf : std::string("; ") + buf;
  }
  return Status::Internal(what + (reasons.empty() ? "" : ": " + reasons));
}

Result<std::string> ReadTextFile(const fs::path& path, const std::string& what_to_do) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::NotFound(path.string() + " is missing; " + what_to_do);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::FromErrno(errno, "cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `text` to `path` with exactly `mode`: into a temporary file first,
// renamed into place, so a failure never leaves half a key.
Status WriteFileWithMode(const fs::path& path, const std::string& text, mode_t mode) {
  const std::string tmp = path.string() + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return Status::FromErrno(errno, "cannot create " + tmp);
  Status st;
  if (::fchmod(fd, mode) != 0) st = Status::FromErrno(errno, "cannot chmod " + tmp);
  for (size_t done = 0; st.ok() && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      st = Status::FromErrno(errno, "cannot write " + tmp);
    else
      done += static_cast<size_t>(n);
  }
  if (st.ok() && ::fsync(fd) != 0) st = Status::FromErrno(errno, "cannot sync " + tmp);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = Status::FromErrno(errno, "cannot rename " + tmp);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

Status RefuseExisting(const std::vector<fs::path>& paths, bool force) {
  if (force) return Status::OK();
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::exists(p, ec))
      return Status::FailedPrecondition(p.string() + " already exists; not overwritten (pass --force to replace it)");
  }
  return Status::OK();
}

Result<PkeyPtr> NewP256Key() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslError("cannot generate an EC P-256 key");
  return key;
}

// The PEM text `write` puts into a memory BIO (1 = success, OpenSSL's way).
template <typename WritePem>
Result<std::string> PemText(WritePem write, const std::string& what) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) return OpenSslError("cannot encode " + what);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

Result<std::string> KeyToPem(EVP_PKEY* key) {
  return PemText([key](BIO* b) { return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); },
                 "a private key");
}

Result<std::string> CertToPem(X509* cert) {
  return PemText([cert](BIO* b) { return PEM_write_bio_X509(b, cert); }, "a certificate");
}

Result<X509Ptr> ParseCert(const std::string& pem, const std::string& origin) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) {
    ERR_clear_error();
    return Status::InvalidArgument(origin + " is not a PEM certificate");
  }
  return cert;
}

Result<PkeyPtr> ParseKey(const std::string& pem, const std::string& origin) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) {
    ERR_clear_error();
    return Status::InvalidArgument(origin + " is not an unencrypted PEM private key");
  }
  return key;
}

// A certificate for `subject_key`, its serial random (RFC 5280: positive, at
// most 20 octets), valid from an hour ago (boards without a real-time clock
// are often a little behind) for `days`.
Result<X509Ptr> NewCertificate(const std::string& common_name, EVP_PKEY* subject_key, int days) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1) return OpenSslError("cannot make a certificate");
  BnPtr serial(BN_new());
  if (!serial || BN_rand(serial.get(), 159, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())))
    return OpenSslError("cannot make a serial number");
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr))
    return OpenSslError("cannot set the validity period");
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("tessera"), -1, -1,
                                 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                                 -1, -1, 0) != 1)
    return OpenSslError("cannot set the subject name " + common_name);
  if (X509_set_pubkey(cert.get(), subject_key) != 1) return OpenSslError("cannot set the public key");
  return cert;
}

// Adds the extension `nid` = `value` (OpenSSL's configuration syntax, only
// constant strings here), with `issuer` for authorityKeyIdentifier.
Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return OpenSslError(std::string("cannot add the extension ") + OBJ_nid2sn(nid) + " = " + value);
  return Status::OK();
}

bool IsPlainName(const std::string& name) {
  if (name.empty() || name.size() > 64 || !std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

bool IsDnsName(const std::string& host) {
  if (host.empty() || host.size() > 253 || host.front() == '.' || host.back() == '.') return false;
  for (char c : host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' && c != '*') return false;
  return true;
}

// subjectAltName: DNS entries for names, IP entries for addresses; each
// once, in the order given.
Result<NamesPtr> AltNames(const std::vector<std::string>& hosts) {
  NamesPtr names(sk_GENERAL_NAME_new_null());
  if (!names) return OpenSslError("cannot make subjectAltName");
  std::vector<std::string> seen;
  for (const std::string& host : hosts) {
    if (std::find(seen.begin(), seen.end(), host) != seen.end()) continue;
    seen.push_back(host);
    GENERAL_NAME* gn = nullptr;
    if (ASN1_OCTET_STRING* ip = a2i_IPADDRESS(host.c_str())) {
      gn = GENERAL_NAME_new();
      if (!gn) {
        ASN1_OCTET_STRING_free(ip);
        return OpenSslError("cannot make subjectAltName");
      }
      GENERAL_NAME_set0_value(gn, GEN_IPADD, ip);
    } else {
      ERR_clear_error();
      if (!IsDnsName(host))
        return Status::InvalidArgument("host \"" + host +
                                       "\" is neither an IP address nor a DNS name (letters, digits, '.', '-')");
      ASN1_IA5STRING* dns = ASN1_IA5STRING_new();
      gn = GENERAL_NAME_new();
      if (!dns || !gn || ASN1_STRING_set(dns, host.data(), static_cast<int>(host.size())) != 1) {
        ASN1_IA5STRING_free(dns);
        GENERAL_NAME_free(gn);
        return OpenSslError("cannot make subjectAltName");
      }
      GENERAL_NAME_set0_value(gn, GEN_DNS, dns);
    }
    if (!sk_GENERAL_NAME_push(names.get(), gn)) {
      GENERAL_NAME_free(gn);
      return OpenSslError("cannot make subjectAltName");
    }
  }
  return names;
}

}  // namespace

Status CreateClusterCa(const CaOptions& options) {
  if (options.dir.empty()) return Status::InvalidArgument("no directory given (--dir)");
  if (options.days < 1) return Status::InvalidArgument("--days must be at least 1");
  const fs::path dir(options.dir), crt = dir / kCaCertFile, key_path = dir / kCaKeyFile;
  TS_RETURN_IF_ERROR(RefuseExisting({crt, key_path}, options.force));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir.string() + ": " + ec.message());

  TS_ASSIGN_OR_RETURN(PkeyPtr key, NewP256Key());
  TS_ASSIGN_OR_RETURN(X509Ptr cert, NewCertificate(options.common_name, key.get(), options.days));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1)
    return OpenSslError("cannot set the issuer name");
  TS_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  TS_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  TS_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  TS_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0) return OpenSslError("cannot sign the CA certificate");

  TS_ASSIGN_OR_RETURN(std::string key_pem, KeyToPem(key.get()));
  TS_ASSIGN_OR_RETURN(std::string cert_pem, CertToPem(cert.get()));
  // The key first: a certificate without its key is useless, the reverse
  // would be re-issued by --force anyway.
  TS_RETURN_IF_ERROR(WriteFileWithMode(key_path, key_pem, 0600));
  return WriteFileWithMode(crt, cert_pem, 0644);
}

Status IssueDeviceCertificate(const IssueOptions& options) {
  if (options.dir.empty()) return Status::InvalidArgument("no directory given (--dir)");
  if (!IsPlainName(options.name) || options.name == "ca")
    return Status::InvalidArgument("name \"" + options.name +
                                   "\" is not a device name: 1-64 letters, digits, '.', '_' or '-', starting with a "
                                   "letter or digit, and not \"ca\"");
  if (options.days < 1) return Status::InvalidArgument("--days must be at least 1");
  const fs::path dir(options.dir);
  const fs::path crt = dir / (options.name + ".crt"), key_path = dir / (options.name + ".key");
  const std::string init_hint = "run `tessera certs init --dir " + dir.string() + "` first";
  TS_ASSIGN_OR_RETURN(std::string ca_pem, ReadTextFile(dir / kCaCertFile, "no cluster CA here: " + init_hint));
  TS_ASSIGN_OR_RETURN(std::string ca_key_pem,
                      ReadTextFile(dir / kCaKeyFile, "the CA's key is needed to issue certificates: " + init_hint +
                                                         ", or issue on the machine that holds it"));
  TS_ASSIGN_OR_RETURN(X509Ptr ca, ParseCert(ca_pem, (dir / kCaCertFile).string()));
  TS_ASSIGN_OR_RETURN(PkeyPtr ca_key, ParseKey(ca_key_pem, (dir / kCaKeyFile).string()));
  if (X509_check_private_key(ca.get(), ca_key.get()) != 1) {
    ERR_clear_error();
    return Status::FailedPrecondition((dir / kCaKeyFile).string() + " is not the key of " +
                                      (dir / kCaCertFile).string());
  }
  std::vector<std::string> hosts{options.name};
  if (options.hosts.empty()) {
    hosts.push_back("127.0.0.1");
    hosts.push_back("localhost");
  }
  hosts.insert(hosts.end(), options.hosts.begin(), options.hosts.end());
  TS_ASSIGN_OR_RETURN(NamesPtr alt_names, AltNames(hosts));
  TS_RETURN_IF_ERROR(RefuseExisting({crt, key_path}, options.force));

  TS_ASSIGN_OR_RETURN(PkeyPtr key, NewP256Key());
  TS_ASSIGN_OR_RETURN(X509Ptr cert, NewCertificate(options.name, key.get(), options.days));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get())) != 1)
    return OpenSslError("cannot set the issuer name");
  TS_RETURN_IF_ERROR(AddExtension(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE"));
  TS_RETURN_IF_ERROR(AddExtension(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature,keyAgreement"));
  // Every tessera process both serves and calls (workers call their peers).
  TS_RETURN_IF_ERROR(AddExtension(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth,clientAuth"));
  TS_RETURN_IF_ERROR(AddExtension(cert.get(), ca.get(), NID_subject_key_identifier, "hash"));
  TS_RETURN_IF_ERROR(AddExtension(cert.get(), ca.get(), NID_authority_key_identifier, "keyid:always"));
  if (X509_add1_ext_i2d(cert.get(), NID_subject_alt_name, alt_names.get(), 0, X509V3_ADD_DEFAULT) != 1)
    return OpenSslError("cannot add subjectAltName");
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) <= 0)
    return OpenSslError("cannot sign the certificate of " + options.name);

  TS_ASSIGN_OR_RETURN(std::string key_pem, KeyToPem(key.get()));
  TS_ASSIGN_OR_RETURN(std::string cert_pem, CertToPem(cert.get()));
  TS_RETURN_IF_ERROR(WriteFileWithMode(key_path, key_pem, 0600));
  return WriteFileWithMode(crt, cert_pem, 0644);
}

Status VerifyIssuedBy(const std::string& ca_pem, const std::string& cert_pem) {
  TS_ASSIGN_OR_RETURN(X509Ptr ca, ParseCert(ca_pem, "the CA certificate"));
  TS_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(cert_pem, "the certificate"));
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1)
    return OpenSslError("cannot set up certificate verification");
  if (X509_verify_cert(ctx.get()) == 1) return Status::OK();
  ERR_clear_error();
  return Status::FailedPrecondition(X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
}

Result<std::vector<std::string>> SubjectAltNames(const std::string& cert_pem) {
  TS_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(cert_pem, "the certificate"));
  NamesPtr names(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  std::vector<std::string> out;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names.get(), i);
    if (gn->type == GEN_DNS) {
      const ASN1_IA5STRING* s = gn->d.dNSName;
      out.push_back("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                         static_cast<size_t>(ASN1_STRING_length(s))));
    } else if (gn->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = gn->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = "?";
      const int family = ip->length == 4 ? AF_INET : AF_INET6;
      if (ip->length == 4 || ip->length == 16) inet_ntop(family, ip->data, text, sizeof text);
      out.push_back("IP:" + std::string(text));
    }
  }
  return out;
}

Result<TlsIdentity> LoadTlsIdentity(const std::string& dir, const std::string& name) {
  if (dir.empty()) return Status::InvalidArgument("no TLS directory given (--tls-dir)");
  if (!IsPlainName(name))
    return Status::InvalidArgument("TLS name \"" + name + "\" is not a plain name (letters, digits, '.', '_', '-')");
  const fs::path d(dir);
  const fs::path ca_path = d / kCaCertFile, crt_path = d / (name + ".crt"), key_path = d / (name + ".key");
  const std::string issue_hint = "issue one with `tessera certs issue --dir DIR --name " + name +
                                 "` where the CA key is and copy NAME.crt, NAME.key and ca.crt here, or pass "
                                 "--tls-name";
  TlsIdentity id;
  id.dir = dir;
  id.name = name;
  TS_ASSIGN_OR_RETURN(id.ca_pem, ReadTextFile(ca_path, "it is the cluster CA's certificate (`tessera certs init`)"));
  TS_ASSIGN_OR_RETURN(id.cert_pem, ReadTextFile(crt_path, issue_hint));
  TS_ASSIGN_OR_RETURN(id.key_pem, ReadTextFile(key_path, issue_hint));
  TS_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(id.cert_pem, crt_path.string()));
  TS_RETURN_IF_ERROR(ParseCert(id.ca_pem, ca_path.string()).status());
  TS_ASSIGN_OR_RETURN(PkeyPtr key, ParseKey(id.key_pem, key_path.string()));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Status::FailedPrecondition(key_path.string() + " is not the key of " + crt_path.string());
  }
  if (Status st = VerifyIssuedBy(id.ca_pem, id.cert_pem); !st.ok())
    return Status::FailedPrecondition(crt_path.string() + " does not verify against " + ca_path.string() + ": " +
                                      st.message());
  return id;
}

}  // namespace tessera
