// Shared by the cluster tests (tests/unit/daemon/cluster/*_test.cc): the
// answer check and a plaintext loopback Worker stub.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "partition/graph/graph.h"
#include "proto/services.grpc.pb.h"
#include "transport/grpc/grpc_channel.h"

namespace tessera {

// max|a-b| / max|b| (INFINITY when the shapes differ): issue 5's tolerance is 1e-5.
inline double MaxRelDiff(const TensorData& a, const TensorData& b) {
  if (a.shape != b.shape || a.values.size() != b.values.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a.values[i] - b.values[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b.values[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline std::unique_ptr<proto::Worker::Stub> WorkerStub(const std::string& address) {
  auto channel = OpenChannel(address, TransportSecurity{});
  REQUIRE(channel.ok());
  return proto::Worker::NewStub(*channel);
}

}  // namespace tessera
