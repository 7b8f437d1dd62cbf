#include "transport/tls/content_hash.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cerrno>
#include <cstdio>
#include <random>
#include <vector>

namespace tessera {

struct Sha256::Context {
  EVP_MD_CTX* ctx = nullptr;
  ~Context() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : context_(std::make_unique<Context>()) {
  context_->ctx = EVP_MD_CTX_new();
  // Only allocation can fail here; a null context then digests nothing and
  // Digest() returns "" (callers compare digests, so nothing matches it).
  if (context_->ctx && EVP_DigestInit_ex(context_->ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(context_->ctx);
    context_->ctx = nullptr;
  }
}

Sha256::~Sha256() = default;

void Sha256::Update(std::string_view bytes) {
  if (context_->ctx && !bytes.empty()) EVP_DigestUpdate(context_->ctx, bytes.data(), bytes.size());
}

std::string Sha256::Digest() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!context_->ctx || EVP_DigestFinal_ex(context_->ctx, out, &n) != 1) return "";
  return std::string(reinterpret_cast<const char*>(out), n);
}

std::string Sha256::HexDigest() {
  static const char kHex[] = "0123456789abcdef";
  const std::string raw = Digest();
  std::string hex;
  hex.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return hex;
}

std::string Sha256Digest(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.Digest();
}

std::string Sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.HexDigest();
}

Result<std::string> Sha256FileHex(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::FromErrno(errno, path);
  Sha256 h;
  std::vector<char> block(1 << 20);
  size_t n = 0;
  while ((n = std::fread(block.data(), 1, block.size(), f)) > 0) h.Update(std::string_view(block.data(), n));
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return Status::IOError("cannot read " + path);
  return h.HexDigest();
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

uint32_t RandomUint32() {
  uint32_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) == 1) return v;
  return static_cast<uint32_t>(std::random_device{}());  // the kernel's generator
}

}  // namespace tessera
