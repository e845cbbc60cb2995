// kiln-cpu-linear-bench: times kernels/cpu's Linear on SmolLM2-135M's shapes (or the random 98.6M
// model's, tools/bench/make_random_llama.py) at every
// instruction-set level this CPU has (kernels/cpu/cpu_isa.h), fp32, bf16 and fp16 weights, on the
// threads OMP_NUM_THREADS gives (kernels/cpu/worker_pool.h), against the machine's own limits
// measured in the same run:
//   decode (1 row): weight bytes per second over a read-only pass over a buffer of the same size
//     (the bandwidth any kernel could stream those weights at);
//   prefill (512 rows): GFLOP/s, printed next to the decode figures for scale.
// Every weight set is 4x the last-level cache or more apart from the one timed, so decode reads
// come from memory as in a real step (the model's 538 MB of fp32 weights never fit).
//
//   build/tools/bench/cpu_linear_bench [REPEATS [ISA [MODEL [WEIGHT]]]]
//     ISA: only that level, e.g. avx2 (or "all"); MODEL: smollm2 (default) or random-98.6m;
//     WEIGHT: only that weight type, fp32, bf16 or fp16
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
#include <memory>
#include <random>
#include <vector>

namespace cpu = kiln::kernels::cpu;

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  const char *name;
  int32_t in, out;
  bool prefill = true; // timed on 512 rows too (not the lm_head, which runs on a few rows only)
};
// SmolLM2-135M: hidden 576, intermediate 1536, 9 + 2 x 3 heads of 64, vocab 49152.
const std::vector<Shape> kSmolLm2Shapes = {
    {"qkv 576->960", 576, 960},
    {"o 576->576", 576, 576},
    {"gate_up 576->3072", 576, 3072},
    {"down 1536->576", 1536, 576},
    {"lm_head 576->49152", 576, 49152, false},
};
// The random 98.6M model: hidden 1024, intermediate 2816, 16 + 2 x 4 heads of 64, vocab 8192.
const std::vector<Shape> kRandom98Shapes = {
    {"qkv 1024->1536", 1024, 1536},
    {"o 1024->1024", 1024, 1024},
    {"gate_up 1024->5632", 1024, 5632},
    {"down 2816->1024", 2816, 1024},
    {"lm_head 1024->8192", 1024, 8192, false},
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// 64-byte aligned storage, as kiln allocates packed weights and activations
// (runtime/hal/cpu_device.cc): at a vector's 16-byte alignment each 64-byte load of a panel may
// span two cache lines, depending on where the allocation happened to land.
struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};
template <typename T> struct AlignedBuffer {
  std::unique_ptr<T[], FreeDeleter> storage;
  explicit AlignedBuffer(size_t count, T value = T{})
      : storage(static_cast<T *>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64))) {
    std::fill_n(storage.get(), count, value);
  }
  T *data() const { return storage.get(); }
  T &operator[](size_t i) const { return storage[i]; }
};

// Copies of one weight matrix, used in turn so a decode call never finds its weights in cache;
// and, where the level packs weights (cpu::packLinearWeights, as `kiln` does when it prepares a
// Linear), each copy packed.
struct Weights {
  std::vector<AlignedBuffer<uint16_t>> copies; // raw storage (fp32 as two halves)
  std::vector<AlignedBuffer<uint8_t>> packed;
  size_t bytes;
};

Weights makeWeights(const Shape &s, cpu::WeightType type, size_t minTotalBytes) {
  const size_t count = static_cast<size_t>(s.in) * s.out;
  const size_t bytes = count * (type == cpu::WeightType::kF32 ? 4 : 2);
  const size_t copies = std::max<size_t>(2, (minTotalBytes + bytes - 1) / bytes);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  Weights w{{}, {}, bytes};
  for (size_t c = 0; c < copies; ++c)
    w.copies.emplace_back(bytes / 2);
  for (auto &copy : w.copies) {
    if (type == cpu::WeightType::kF32) {
      auto *f = reinterpret_cast<float *>(copy.data());
      for (size_t i = 0; i < count; ++i)
        f[i] = dist(rng);
    } else {
      for (size_t i = 0; i < count; ++i) {
        const float v = dist(rng);
        copy[i] = type == cpu::WeightType::kF16 ? kiln::f32ToF16(v) : kiln::f32ToBf16(v);
      }
    }
  }
  const size_t packedBytes = cpu::linearPackedWeightBytes(type, s.out, s.in);
  if (packedBytes)
    for (const auto &copy : w.copies) {
      w.packed.emplace_back(packedBytes);
      cpu::packLinearWeights(copy.data(), type, s.out, s.in, w.packed.back().data());
    }
  return w;
}

// Median seconds of `repeats` calls, each on the next weight copy.
double timeLinear(const Shape &s, cpu::WeightType type, const Weights &w, int rows, int repeats) {
  const AlignedBuffer<float> x(static_cast<size_t>(rows) * s.in, 0.01f);
  const AlignedBuffer<float> out(static_cast<size_t>(rows) * s.out);
  std::vector<double> times;
  for (int r = -2; r < repeats; ++r) {
    const size_t copy = (r + 2) % w.copies.size();
    cpu::LinearArgs args{x.data(), w.copies[copy].data(), type, nullptr, out.data(), rows, s.in,
                         s.out};
    if (!w.packed.empty())
      args.packedWeight = w.packed[copy].data();
    const Clock::time_point start = Clock::now();
    cpu::linear(args);
    const Clock::time_point end = Clock::now();
    if (r >= 0)
      times.push_back(seconds(start, end));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Bytes per second of summing a buffer of `bytes` (split over the pool like a kernel), median of
// `repeats` passes over rotating copies.
double readBandwidth(size_t bytes, size_t minTotalBytes, int repeats) {
  const size_t floats = bytes / 4;
  const size_t copies = std::max<size_t>(2, (minTotalBytes + bytes - 1) / bytes);
  std::vector<std::vector<float>> buffers(copies, std::vector<float>(floats, 1.0f));
  std::vector<double> times;
  volatile float sink = 0;
  for (int r = -2; r < repeats; ++r) {
    const float *data = buffers[(r + 2) % copies].data();
    std::vector<float> partial(64 * 16, 0.0f);
    const Clock::time_point start = Clock::now();
    cpu::parallelRun(true, [&](int worker, int workers) {
      const cpu::IndexRange range = cpu::staticRange(static_cast<int64_t>(floats), worker, workers);
      float acc[16] = {};
      int64_t i = range.begin;
      for (; i + 16 <= range.end; i += 16)
        for (int l = 0; l < 16; ++l)
          acc[l] += data[i + l];
      for (; i < range.end; ++i)
        acc[0] += data[i];
      for (int l = 0; l < 16; ++l)
        partial[worker * 16 + l] = acc[l];
    });
    const Clock::time_point end = Clock::now();
    for (float p : partial)
      sink = sink + p;
    if (r >= 0)
      times.push_back(seconds(start, end));
  }
  std::sort(times.begin(), times.end());
  return static_cast<double>(bytes) / times[times.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  const size_t spread = size_t(256) << 20; // rotate over >= 256 MiB: far above any LLC here
  const bool random98 = argc > 3 && std::strcmp(argv[3], "random-98.6m") == 0;
  const std::vector<Shape> &shapes = random98 ? kRandom98Shapes : kSmolLm2Shapes;
  const char *weightOnly = argc > 4 ? argv[4] : nullptr;
  std::printf("cpu Linear on %s shapes, %d threads, median of %d calls\n",
              random98 ? "random-98.6M" : "SmolLM2-135M", cpu::cpuThreads(), repeats);
  std::printf("%-10s %-6s %-20s %10s %9s %8s %12s\n", "isa", "weight", "shape", "decode us", "GB/s",
              "of read", "prefill GF/s");
  cpu::CpuIsa only{};
  const bool oneIsa = argc > 2 && cpu::parseCpuIsa(argv[2], only);
  for (cpu::CpuIsa isa : cpu::availableCpuIsas()) {
    if (oneIsa && isa != only)
      continue;
    cpu::setCpuIsa(isa);
    for (cpu::WeightType type :
         {cpu::WeightType::kF32, cpu::WeightType::kBF16, cpu::WeightType::kF16}) {
      const char *typeName = type == cpu::WeightType::kF32    ? "fp32"
                             : type == cpu::WeightType::kBF16 ? "bf16"
                                                              : "fp16";
      if (weightOnly && std::strcmp(weightOnly, typeName) != 0)
        continue;
      for (const Shape &s : shapes) {
        const Weights w = makeWeights(s, type, spread);
        const double decode = timeLinear(s, type, w, 1, repeats);
        const double read = readBandwidth(w.bytes, spread, repeats);
        const double prefill = s.prefill ? timeLinear(s, type, w, 512, repeats) : 0;
        std::printf("%-10s %-6s %-20s %10.1f %9.2f %8.2f", cpu::cpuIsaName(isa), typeName, s.name,
                    decode * 1e6, w.bytes / decode / 1e9, w.bytes / decode / read);
        if (s.prefill)
          std::printf(" %12.1f\n", 2.0 * 512 * s.in * s.out / prefill / 1e9);
        else
          std::printf(" %12s\n", "-");
      }
    }
  }
  return 0;
}
