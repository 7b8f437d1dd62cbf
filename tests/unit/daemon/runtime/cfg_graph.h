// Test models written as darknet cfg text and imported with seeded
// weights (memory_flow_test, parts_search_test).
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "partition/graph/graph.h"
#include "partition/import/model_import.h"

namespace tessera {

// `text` written to a scratch .cfg named after `name`, imported, removed.
inline Graph FromCfg(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/tessera_cfg_graph_" + std::to_string(getpid()) + "_" + name + ".cfg";
  {
    std::ofstream f(path);
    f << text;
  }
  auto g = ImportModel(path, ImportOptions());
  std::remove(path.c_str());
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  return std::move(*g);
}

}  // namespace tessera
