// zs_plan's cluster plan report (`zs_plan --cluster FILE --transformer
// SPEC`): the model's and the cluster's summary, the plans that fit ranked
// by tokens a second with their memory, step, MFU, time and cost to train,
// why the first one wins (its step by part), and the faster plans that do
// not fit with the tier and the overflow (runtime/cluster_plan/
// mesh_search.h). A library part of zs_plan, so that tests check its text.
#pragma once

#include <optional>
#include <string>

#include "runtime/cluster_plan/mesh_search.h"

namespace zeroshard::tools {

/// The report of `result` for `request`: at most `top` plans that fit
/// (top >= 1), then up to `top` rejected plans predicted faster than the
/// first fit (when nothing fits, those with the smallest device bytes). With
/// `train_tokens` the time to train that many tokens and, with the
/// cluster's price, its cost. Pure.
std::string cluster_plan_text(const MeshSearchRequest& request, const MeshSearchResult& result,
                              std::optional<double> train_tokens, int top);

}  // namespace zeroshard::tools
