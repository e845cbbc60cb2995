// kiln-cpu-attention-bench: times kernels/cpu's decode attention (one new token for each of BATCH
// sequences over a paged cache, as in a batched decode step) on SmolLM2-135M's shapes (9 query
// heads, 3 kv heads, 64 dimensions, 30 layers) or the random 98.6M model's (16, 4, 64, 8 layers;
// tools/bench/make_random_llama.py), with a bf16 or fp32 cache, at the CPU's highest
// instruction-set level (KILN_CPU_ISA lowers it, kernels/cpu/cpu_isa.h) on the threads
// OMP_NUM_THREADS gives (kernels/cpu/worker_pool.h), against the machine's own limit measured in
// the same run: a read-only pass over the same bytes (the cache bandwidth any kernel could reach).
// Each call reads the next layer's cache, the model's layers cycled as a decode step cycles them,
// so the cache comes from memory as in a real step, not from the last call's L2. The cache blocks
// (16 positions, the compile default) are shuffled, as a serving cache's are.
//
// Prints the median call in microseconds, the cache bytes per second and their fraction of the
// read pass, and a hash of the outputs: builds that keep the kernel's bits print the same hash.
//
//   build/tools/bench/cpu_attention_bench [MODEL [DTYPE [BATCH [CONTEXT [CALLS]]]]]
//     MODEL: smollm2 (default) or random-98.6m; DTYPE: bf16 (default) or fp32;
//     BATCH: sequences (32); CONTEXT: positions each sees (192); CALLS: timed calls (300)
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/worker_pool.h"
#include "runtime/base/half.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace cpu = kiln::kernels::cpu;

namespace {

using Clock = std::chrono::steady_clock;

struct Model {
  const char *name;
  int32_t heads, kvHeads, headDim, layers;
};
constexpr Model kModels[] = {{"smollm2", 9, 3, 64, 30}, {"random-98.6m", 16, 4, 64, 8}};
constexpr int32_t kBlockSize = 16;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Random values in the element type's bytes: bf16 rounded from N(0, 1), or fp32.
std::vector<uint8_t> randomElements(size_t count, bool bf16, std::mt19937 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> bytes(count * (bf16 ? 2 : 4));
  for (size_t i = 0; i < count; ++i) {
    const float x = normal(rng);
    if (bf16) {
      const uint16_t h = kiln::f32ToBf16(x);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    }
  }
  return bytes;
}

// Median seconds of a read-only pass over layer l's key and value bytes, layers cycled as the
// attention calls cycle them.
double readPass(const std::vector<std::vector<uint8_t>> &k,
                const std::vector<std::vector<uint8_t>> &v, int calls) {
  std::vector<double> times;
  volatile float sink = 0;
  for (int c = -2; c < calls; ++c) {
    const size_t layer = size_t(c + 2) % k.size();
    std::vector<float> partial(64 * 16, 0.0f);
    const Clock::time_point start = Clock::now();
    cpu::parallelRun(true, [&](int worker, int workers) {
      float acc[16] = {};
      for (const std::vector<uint8_t> *bytes : {&k[layer], &v[layer]}) {
        const auto *data = reinterpret_cast<const float *>(bytes->data());
        const cpu::IndexRange range =
            cpu::staticRange(static_cast<int64_t>(bytes->size() / 64) * 16, worker, workers);
        for (int64_t i = range.begin; i < range.end; i += 16)
          for (int l = 0; l < 16; ++l)
            acc[l] += data[i + l];
      }
      for (int l = 0; l < 16; ++l)
        partial[worker * 16 + l] = acc[l];
    });
    const Clock::time_point end = Clock::now();
    for (float p : partial)
      sink = sink + p;
    if (c >= 0)
      times.push_back(seconds(start, end));
  }
  return median(times);
}

} // namespace

int main(int argc, char **argv) {
  const std::string modelName = argc > 1 ? argv[1] : "smollm2";
  const std::string dtype = argc > 2 ? argv[2] : "bf16";
  const int32_t batch = argc > 3 ? std::atoi(argv[3]) : 32;
  const int32_t context = argc > 4 ? std::atoi(argv[4]) : 192;
  const int calls = argc > 5 ? std::atoi(argv[5]) : 300;
  const Model *model = nullptr;
  for (const Model &m : kModels)
    if (modelName == m.name)
      model = &m;
  if (model == nullptr || (dtype != "bf16" && dtype != "fp32") || batch < 1 || context < 1 ||
      calls < 1) {
    std::fprintf(stderr, "usage: cpu_attention_bench [smollm2|random-98.6m [bf16|fp32 [BATCH>=1 "
                         "[CONTEXT>=1 [CALLS>=1]]]]]\n");
    return 2;
  }
  const bool bf16 = dtype == "bf16";
  const int32_t blocksPerSeq = (context + kBlockSize - 1) / kBlockSize;
  const size_t cacheElems =
      size_t(batch) * blocksPerSeq * model->kvHeads * kBlockSize * model->headDim;
  std::mt19937 rng(1);
  std::vector<std::vector<uint8_t>> k, v;
  for (int32_t l = 0; l < model->layers; ++l) {
    k.push_back(randomElements(cacheElems, bf16, rng));
    v.push_back(randomElements(cacheElems, bf16, rng));
  }
  const size_t qElems = size_t(batch) * model->heads * model->headDim;
  const std::vector<uint8_t> q = randomElements(qElems, bf16, rng);
  std::vector<uint8_t> out(q.size());
  std::vector<int32_t> positions(batch, context - 1), queryStart(batch + 1),
      contextLens(batch, context), blockTables(size_t(batch) * blocksPerSeq);
  for (int32_t s = 0; s <= batch; ++s)
    queryStart[s] = s;
  for (size_t b = 0; b < blockTables.size(); ++b)
    blockTables[b] = int32_t(b);
  std::shuffle(blockTables.begin(), blockTables.end(), rng);

  cpu::AttentionArgs args{};
  args.q = q.data();
  args.positions = positions.data();
  args.queryStartLoc = queryStart.data();
  args.contextLens = contextLens.data();
  args.blockTables = blockTables.data();
  args.maxBlocksPerSeq = blocksPerSeq;
  args.out = out.data();
  args.numSeqs = batch;
  args.numTokens = batch;
  args.numHeads = model->heads;
  args.numKvHeads = model->kvHeads;
  args.headDim = model->headDim;
  args.blockSize = kBlockSize;
  args.scale = 1.0f / 8.0f;
  args.type = args.kvType = bf16 ? cpu::ElemType::kBF16 : cpu::ElemType::kF32;

  std::vector<double> times;
  uint64_t hash = 1469598103934665603ull;
  for (int c = -2; c < calls; ++c) {
    const size_t layer = size_t(c + 2) % k.size();
    args.kCache = k[layer].data();
    args.vCache = v[layer].data();
    const Clock::time_point start = Clock::now();
    cpu::attention(args);
    const Clock::time_point end = Clock::now();
    if (c >= 0)
      times.push_back(seconds(start, end));
    if (c < 0 || size_t(c + 2) < k.size()) // every layer's output once
      for (uint8_t byte : out)
        hash = (hash ^ byte) * 1099511628211ull;
  }
  const double call = median(times), read = readPass(k, v, calls);
  const double bytes =
      2.0 * double(batch) * context * model->kvHeads * model->headDim * (bf16 ? 2 : 4);
  std::printf("cpu attention decode, %s %s, batch %d at context %d, isa %s, %d threads\n",
              model->name, dtype.c_str(), batch, context, cpu::cpuIsaName(cpu::activeCpuIsa()),
              cpu::cpuThreads());
  std::printf("  median call %.1f us: %.2f GB/s of cache, %.2f of a read pass (%.2f GB/s)\n",
              call * 1e6, bytes / call / 1e9, read / call,
              2.0 * cacheElems * (bf16 ? 2 : 4) / read / 1e9);
  std::printf("  output hash %016llx\n", static_cast<unsigned long long>(hash));
  return 0;
}
