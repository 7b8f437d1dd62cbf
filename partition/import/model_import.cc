// ImportModel: picks the importer by file extension (model_import.h).
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "partition/import/model_import.h"

namespace tessera {

Result<Graph> ImportModel(const std::string& path, const ImportOptions& options) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".onnx") return ImportOnnx(path, options);
  if (ext == ".cfg") return ImportDarknet(path, options);
  return Status::InvalidArgument(path + ": unknown model format '" + ext +
                                 "'; expected an ONNX model (.onnx) or a darknet config (.cfg)");
}

}  // namespace tessera
