// SHA-256 (OpenSSL's libcrypto) for what tessera must recognise again
// without trusting its sender: a device program's encoded bytes (a program
// is identified by this hash on the worker, issue 14 "Bounded by
// construction"), a model file (part of a deployed plan's id), and bearer
// tokens (kept and compared as digests, never as text).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "util/status.h"

namespace tessera {

// Incremental SHA-256: Update with the bytes in order, then HexDigest once.
// Not thread-safe; one object per stream of bytes.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::string_view bytes);
  // The 32-byte digest; the object may not be updated afterwards.
  std::string Digest();
  // The same as 64 lowercase hex digits.
  std::string HexDigest();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

// SHA-256 of `bytes`: raw 32 bytes / 64 hex digits.
std::string Sha256Digest(std::string_view bytes);
std::string Sha256Hex(std::string_view bytes);

// SHA-256 of a file's bytes, read in blocks (constant memory); IOError
// naming the path when it cannot be read.
Result<std::string> Sha256FileHex(const std::string& path);

// a == b in time that depends on their lengths only (OpenSSL's
// CRYPTO_memcmp), for secrets such as token digests.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Unpredictable 32 bits from OpenSSL's CSPRNG (RAND_bytes).
uint32_t RandomUint32();

}  // namespace tessera
