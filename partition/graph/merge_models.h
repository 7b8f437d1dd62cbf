// Several models as one graph whose identical layers are shared (issue 18
// item 4, "reuse across models"): a camera stream that feeds a detector and
// a classifier, or two heads on one backbone, planned, compiled and run as
// one model. Every request runs every model on its inputs; the plan holds a
// shared layer's weights once and one arena per device serves every model
// (buffers reused by liveness across the models, partition/graph/arena_layout.h).
//
// What is shared:
//  * a graph input of a later model and the input at the same position of
//    the first model when their shapes are equal (one frame feeds both);
//  * a layer whose op, attributes and inputs (after sharing) are those of a
//    layer already in the merged graph, and whose constants hold the same
//    values (compared value by value, not by name);
//  * a constant with the same shape and values as one already there.
// Every other name is prefixed "<model name>/" (the file stem; made unique).
#pragma once

#include <string>
#include <vector>

#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

struct MergedModel {
  std::string name;          // its prefix in the merged graph
  std::vector<int> inputs;   // merged graph input ids, its input order
  std::vector<int> outputs;  // merged graph output ids, its output order
  int layers = 0;            // its own layer count
  int shared_layers = 0;     // of them, layers an earlier model already had
};

struct MergeReport {
  std::vector<MergedModel> models;
  int64_t weight_values_before = 0;  // sum of the models' WeightCount()
  int64_t weight_values_after = 0;   // the merged graph's
  std::string Describe() const;      // one line per model and the totals
};

// REQUIRES: each model validated, with weight values (not shapes-only: the
// values decide what is shared). One model is returned unchanged. Errors
// name the model: no models, or a model without weight values.
Result<Graph> MergeModels(const std::vector<Graph>& models, MergeReport* report = nullptr);

}  // namespace tessera
