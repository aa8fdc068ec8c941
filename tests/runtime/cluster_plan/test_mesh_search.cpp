// The cluster planner's search (runtime/cluster_plan/mesh_search.h, [Note:
// mesh search]): no fit over a budget, every rejection naming the tier and
// the overflow, fits ranked by tokens a second, every candidate using the
// whole cluster and dividing the global batch; a small model on one node
// is best data-parallel; bad requests named.
#include <string>

#include <doctest/doctest.h>

#include "core/error.h"
#include "runtime/cluster_plan/mesh_search.h"
#include "tests/runtime/cluster_plan/cluster_paths.h"

using namespace zeroshard;

namespace {

MeshSearchRequest request(const char* model, const char* cluster, std::int64_t global_batch) {
  MeshSearchRequest r;
  r.model = TransformerShape::parse(model, "t");
  r.cluster = ClusterDescription::from_file(std::string(ZS_CLUSTER_DIR) + "/" + cluster);
  r.global_batch = global_batch;
  return r;
}

constexpr const char* kLlama8b = "kind=llama,layers=32,hidden=4096,heads=32,kv_heads=8,seq=8192,vocab=128256,ffn=14336";

}  // namespace

TEST_CASE("Llama-3-8B on 64 H100: fits within budget, rejections named, ranked by tokens a second") {
  const MeshSearchRequest r = request(kLlama8b, "h100x64.json", 512);
  const MeshSearchResult res = search_mesh_plans(r);
  REQUIRE(!res.fits.empty());
  REQUIRE(!res.rejected.empty());
  for (const MeshCandidate& c : res.fits) {
    CHECK(c.memory.device() <= r.cluster.memory_bytes);
    CHECK(c.memory.host_per_node <= r.cluster.host_memory_bytes);
    CHECK(c.plan.accelerators() == 64);
    CHECK(c.plan.global_batch() == 512);
    CHECK(c.rejected.empty());
  }
  for (std::size_t i = 1; i < res.fits.size(); ++i) CHECK(res.fits[i - 1].tokens_per_s >= res.fits[i].tokens_per_s);
  for (const MeshCandidate& c : res.rejected) {
    CAPTURE(c.rejected);
    CHECK((c.rejected.find("device needs") != std::string::npos || c.rejected.find("host needs") != std::string::npos));
    CHECK(c.rejected.find(" over") != std::string::npos);
  }
  // MFU below the compute efficiency (communication and bubbles only add time), above zero.
  CHECK(res.fits.front().mfu <= r.constants.compute_efficiency + 1e-12);
  CHECK(res.fits.front().mfu > 0.1);
}

TEST_CASE("a small model on one node: data parallelism wins, and a tiny budget rejects everything") {
  MeshSearchRequest r = request("layers=12,hidden=768,heads=12,seq=1024,vocab=50304", "h100x64.json", 64);
  r.cluster.nodes = 1;
  const MeshSearchResult res = search_mesh_plans(r);
  REQUIRE(!res.fits.empty());
  CHECK(res.fits.front().plan.tp == 1);
  CHECK(res.fits.front().plan.pp == 1);
  r.cluster.memory_bytes = 1e8;
  const MeshSearchResult none = search_mesh_plans(r);
  CHECK(none.fits.empty());
  CHECK(!none.rejected.empty());
}

TEST_CASE("bad requests are named") {
  MeshSearchRequest r = request(kLlama8b, "h100x64.json", 0);
  CHECK_THROWS_WITH_AS(search_mesh_plans(r), doctest::Contains("global batch must be >= 1"), ConfigError);
  r.global_batch = 8;
  r.micro_batches = {0};
  CHECK_THROWS_WITH_AS(search_mesh_plans(r), doctest::Contains("micro-batch must be >= 1"), ConfigError);
  MeshSearchRequest v = request(kLlama8b, "v100x400.json", 400);
  v.dtype = DType::bf16;
  CHECK_THROWS_WITH_AS(search_mesh_plans(v), doctest::Contains("no bf16 peak"), ConfigError);
}
