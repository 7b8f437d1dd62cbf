// A tensor written as JSON: nested arrays of numbers (`[[1, 2], [3, 4]]`),
// optionally inside an object's "inputs" member (`{"inputs": [...]}`) — the
// gateway's JSON request body (daemon/cluster/http_endpoint.h).
//
// Read in one streaming pass (nlohmann's SAX parser, which does not recurse)
// straight into float32 values: no JSON document is built, so a request
// costs its text plus 4 bytes per number, and the limits below hold before
// anything else is allocated (issue 14: 100 MB of JSON cost 2.2 GB; JSON
// nested 60 000 deep overflowed the stack).
#pragma once

#include <string>

#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

// Parses `text`. `max_values` bounds the numbers it may hold (the model
// input's element count: more cannot be a valid input). A flat array of
// exactly NumElements(`want`) numbers takes the shape `want`.
// InvalidArgument naming `origin` and what is wrong: not JSON, nested deeper
// than kMaxJsonDepth (util/limits.h), ragged, not numbers, more than
// `max_values` numbers, an object without "inputs".
Result<TensorData> ParseJsonTensor(const std::string& text, const Shape& want, int64_t max_values,
                                   const std::string& origin);

}  // namespace tessera
