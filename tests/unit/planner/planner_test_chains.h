// Hand-built models for the planner tests: chains of LayerFigures whose
// numbers a reader can check with METHODS open, and small Graphs.
#pragma once

#include <string>
#include <vector>

#include "partition/graph/graph.h"
#include "partition/graph/metrics.h"
#include "planner/cluster.h"

namespace tessera::planner_test {

// Dense layers dims[0]→dims[1]→…, no biases: M = in, K = out, Q = R = in·out.
inline std::vector<LayerFigures> DenseChain(const std::vector<int64_t>& dims) {
  std::vector<LayerFigures> layers;
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    LayerFigures f;
    f.index = static_cast<int>(l) + 1;
    f.node = static_cast<int>(l);
    f.name = "dense" + std::to_string(l + 1);
    f.op = "Gemm";
    f.M = dims[l];
    f.K = dims[l + 1];
    f.Q = f.R = dims[l] * dims[l + 1];
    f.input_shapes = {{1, dims[l]}};
    f.output_shape = {1, dims[l + 1]};
    layers.push_back(f);
  }
  return layers;
}

// Devices computing `macs_per_s[i]` MACs per second with the given memory,
// joined by links so fast that transfers are ~free unless `bytes_per_s` says otherwise.
inline Cluster HandCluster(const std::vector<double>& macs_per_s, int64_t flash = kUnlimitedBytes,
                           int64_t ram = kUnlimitedBytes, double bytes_per_s = 1e15) {
  Cluster c;
  c.origin = "test";
  for (size_t i = 0; i < macs_per_s.size(); ++i) {
    Device d;
    d.name = std::string(1, static_cast<char>('A' + i));
    d.macs_per_s = macs_per_s[i];
    d.flash_bytes = flash;
    d.ram_bytes = ram;
    c.devices.push_back(d);
  }
  c.has_default_link = true;
  c.default_link.bytes_per_s = bytes_per_s;
  return c;
}

}  // namespace tessera::planner_test
