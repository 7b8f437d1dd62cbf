// ImportModel: picks the importer by file extension (model_import.h).
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "partition/import/model_import.h"
#include "util/limits.h"

namespace tessera {

Status CheckModelSize(uint64_t bytes, const std::string& origin) {
  if (bytes > static_cast<uint64_t>(kMaxModelBytes))
    return Status::InvalidArgument(origin + ": the model is " + std::to_string(bytes) + " bytes; at most " +
                                   std::to_string(kMaxModelBytes) + " are accepted (util/limits.h)");
  return Status::OK();
}

Result<Graph> ImportModel(const std::string& path, const ImportOptions& options) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (!ec) TS_RETURN_IF_ERROR(CheckModelSize(bytes, path));
  if (ext == ".onnx") return ImportOnnx(path, options);
  if (ext == ".cfg") return ImportDarknet(path, options);
  return Status::InvalidArgument(path + ": unknown model format '" + ext +
                                 "'; expected an ONNX model (.onnx) or a darknet config (.cfg)");
}

void KeepValuesOnlyFor(const std::set<std::string>& nodes, Graph* graph) {
  std::set<int> kept;
  for (const Node& n : graph->nodes)
    if (nodes.count(n.name))
      for (int v : n.inputs)
        if (v >= 0) kept.insert(v);
  for (auto& [id, data] : graph->constants)
    if (!kept.count(id)) std::vector<float>().swap(data.values);
}

}  // namespace tessera
