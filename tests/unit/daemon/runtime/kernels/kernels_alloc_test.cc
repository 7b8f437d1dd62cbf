// The executor's rule "kernels allocate nothing during inference" (kernel.h,
// issue 2), checked by counting heap allocations: this test executable
// replaces glibc's malloc family (operator new goes through malloc, and so do
// Eigen's aligned allocations), and counts calls while a flag is set. A small
// CNN with every GEMM-backed path (im2col conv, 1x1 conv, Winograd conv,
// depthwise conv, Gemm) runs once to warm up (OpenMP's thread pool, the
// caller's output vector), then a second Executor::Run — with the outputs
// vector already holding tensors of the right shape — must allocate zero times.
#include <atomic>
#include <cstdlib>
#include <random>

#include <malloc.h>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/kernels/isa.h"
#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
// Not inlined, so a debugger can break on it to see who allocated.
__attribute__((noinline)) void CountedAllocation() { g_allocations.fetch_add(1, std::memory_order_relaxed); }
inline void Count() {
  if (g_counting.load(std::memory_order_relaxed)) CountedAllocation();
}
}  // namespace

extern "C" {
void* malloc(size_t n) noexcept {
  Count();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) noexcept {
  Count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) noexcept {
  Count();
  return __libc_realloc(p, n);
}
void* memalign(size_t align, size_t n) noexcept {
  Count();
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) noexcept {
  Count();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) noexcept {
  Count();
  *out = __libc_memalign(align, n);
  return *out == nullptr && n != 0 ? 12 /* ENOMEM */ : 0;
}
}

namespace tessera {
namespace {

int Weights(Graph& g, const std::string& name, const Shape& shape, std::mt19937& rng) {
  return g.AddConstant(name, TensorData{shape, testing::RandomValues(NumElements(shape), rng, -0.2f, 0.2f)});
}

int AddConv(Graph& g, const std::string& name, int x, int64_t c, int64_t o, int64_t k, int64_t group, int64_t hw,
            std::mt19937& rng, int64_t winograd_min_channels = 0) {
  Node n;
  n.name = name;
  n.op = "Conv";
  n.inputs = {x, Weights(g, name + ".w", {o, c / group, k, k}, rng), Weights(g, name + ".b", {o}, rng)};
  n.outputs = {g.AddValue(name + ".y", {1, o, hw, hw})};
  n.attrs.Set("kernel_shape", std::vector<int64_t>{k, k});
  n.attrs.Set("pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2});
  n.attrs.Set("group", group);
  n.attrs.Set("activation", std::string("relu"));
  if (winograd_min_channels > 0) n.attrs.Set("winograd_min_channels", winograd_min_channels);
  g.AddNode(n);
  return n.outputs[0];
}

// A small CNN touching every conv strategy plus Gemm; big enough (K·N) that
// a library GEMM would want heap packing buffers.
Graph SmallCnn() {
  std::mt19937 rng(3);
  Graph g;
  g.name = "alloc_cnn";
  const int x = g.AddValue("x", {1, 16, 40, 40});
  g.inputs = {x};
  int y = AddConv(g, "conv3x3", x, 16, 64, 3, 1, 40, rng);              // im2col, implicit on K-blocked levels
  y = AddConv(g, "pointwise", y, 64, 128, 1, 1, 40, rng);               // 1x1
  y = AddConv(g, "winograd", y, 128, 128, 3, 1, 40, rng, 16);           // Winograd F(2x2,3x3)
  y = AddConv(g, "depthwise", y, 128, 128, 3, 128, 40, rng);            // depthwise
  y = AddConv(g, "grouped", y, 128, 128, 3, 32, 40, rng);               // 32 groups of 4 (resnext's)
  Node pool;
  pool.name = "gap";
  pool.op = "GlobalAveragePool";
  pool.inputs = {y};
  pool.outputs = {g.AddValue("gap.y", {1, 128, 1, 1})};
  g.AddNode(pool);
  Node fc;
  fc.name = "fc";
  fc.op = "Gemm";
  fc.inputs = {pool.outputs[0], Weights(g, "fc.w", {10, 128}, rng), Weights(g, "fc.b", {10}, rng)};
  fc.outputs = {g.AddValue("fc.y", {1, 10})};
  fc.attrs.Set("flatten_input", int64_t{1});
  g.AddNode(fc);
  g.outputs = {fc.outputs[0]};
  return g;
}

// Every ISA level this CPU supports (isa.h) runs its own microkernels; each
// must keep the rule, on an AVX-512 machine and on an AVX2-only one alike.
TEST_CASE("Executor::Run allocates nothing after warm-up", "[kernels][executor][alloc]") {
  const Graph graph = SmallCnn();
  std::mt19937 rng(4);
  std::vector<TensorData> inputs{{{1, 16, 40, 40}, testing::RandomValues(16 * 40 * 40, rng)}};
  const Isa initial = ActiveIsa();
  for (Isa isa : SupportedIsas())
  for (int threads : {1, 2}) {
    INFO("ISA " << IsaName(isa));
    REQUIRE(SetActiveIsa(isa).ok());
    auto ex = Executor::Create(graph, {threads});
    REQUIRE(ex.ok());
    std::vector<TensorData> outputs;
    REQUIRE((*ex)->Run(inputs, &outputs).ok());  // warm-up: thread pool, output tensors
    const std::vector<float> first = outputs[0].values;
    g_allocations = 0;
    g_counting = true;
    const Status st = (*ex)->Run(inputs, &outputs);
    g_counting = false;
    INFO("threads " << threads);
    REQUIRE(st.ok());
    CHECK(g_allocations.load() == 0);
    CHECK(outputs[0].values == first);  // and the reused outputs hold the same answer
  }
  REQUIRE(SetActiveIsa(initial).ok());
}

// A plan's memory promise is made on the planner's machine and must hold
// on a worker with another CPU: the arena (kernel scratch included, e.g.
// the conv's implicit im2col, conv.cc) depends on the shapes, not on the
// ISA level the kernels run at.
TEST_CASE("the arena is the same on every ISA level", "[kernels][executor][isa]") {
  const Graph graph = SmallCnn();
  const Isa initial = ActiveIsa();
  for (int threads : {1, 2}) {
    size_t first = 0;
    for (Isa isa : SupportedIsas()) {
      INFO("ISA " << IsaName(isa) << " threads " << threads);
      REQUIRE(SetActiveIsa(isa).ok());
      auto ex = Executor::Create(graph, {threads});
      REQUIRE(ex.ok());
      if (first == 0) first = (*ex)->arena_bytes();
      CHECK((*ex)->arena_bytes() == first);
    }
  }
  REQUIRE(SetActiveIsa(initial).ok());
}

TEST_CASE("a profiling Executor times every node, allocates nothing and answers the same", "[kernels][executor]") {
  const Graph graph = SmallCnn();
  std::mt19937 rng(4);
  std::vector<TensorData> inputs{{{1, 16, 40, 40}, testing::RandomValues(16 * 40 * 40, rng)}};
  auto plain = Executor::Create(graph, {1});
  ExecutorOptions po;
  po.profile = true;
  auto profiled = Executor::Create(graph, po);
  REQUIRE(plain.ok());
  REQUIRE(profiled.ok());
  std::vector<TensorData> want, got;
  REQUIRE((*plain)->Run(inputs, &want).ok());
  CHECK((*plain)->StepSeconds().empty());  // not profiling: nothing recorded
  REQUIRE((*profiled)->Run(inputs, &got).ok());
  const std::vector<double> once = (*profiled)->StepSeconds();
  REQUIRE(once.size() == graph.nodes.size());
  for (size_t n = 0; n < once.size(); ++n) {
    INFO("node " << graph.nodes[n].name);
    CHECK(once[n] > 0);
  }
  g_allocations = 0;
  g_counting = true;
  REQUIRE((*profiled)->Run(inputs, &got).ok());
  g_counting = false;
  CHECK(g_allocations.load() == 0);
  for (size_t n = 0; n < once.size(); ++n) CHECK((*profiled)->StepSeconds()[n] > once[n]);  // sums over runs
  CHECK(got[0].values == want[0].values);
}

}  // namespace
}  // namespace tessera
