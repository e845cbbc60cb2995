// `kiln compile --target cpu,sm_80,sm_90a`: NVRTC modules, per-op kernels and launch rules in the
// artifact (no GPU needed). Without the CUDA code generator, SM targets are refused by name.
#include "compiler/driver/compile.h"
#include "kernels/cuda/params.h"
#include "runtime/artifact/artifact.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using schema::OpParams;

std::string tinyLlama() {
  return std::string(KILN_TEST_DATA_DIR) + "/models/tiny-llama";
}

std::vector<std::string> splitCommas(const std::string &text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ',');)
    parts.push_back(part);
  return parts;
}

class GpuKernelsTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fs::exists(tinyLlama()))
      GTEST_SKIP() << "fixture absent: " << tinyLlama();
    outDir_ = fs::path(::testing::TempDir()) /
              ("kiln_gpu_kernels_" +
               std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(outDir_);
  }
  void TearDown() override { fs::remove_all(outDir_); }

  CompileOptions options(std::vector<std::string> targets) {
    CompileOptions o;
    o.modelDir = tinyLlama();
    o.outDir = outDir_.string();
    o.targets = std::move(targets);
    o.log = &log_;
    return o;
  }

  fs::path outDir_;
  std::ostringstream log_;
};

#ifdef KILN_HAVE_CODEGEN

TEST_F(GpuKernelsTest, SmTargetsRecordModulesKernelsAndGrids) {
  Status status = compileModel(options({"cpu", "sm_80", "sm_90a"}));
  ASSERT_TRUE(status.isOk()) << status.toString() << "\n" << log_.str();
  // The kernels of the plan's ops: embedding, rms_norm, add_rms_norm, rope_kv_write, the three
  // attention kernels, silu_mul and gather_rows (the residual adds are all fused into
  // add_rms_norm, so no add kernel), two GEMVs (in 64: qkv, o, gate_up, lm_head; in 128: down)
  // and the greedy-sampling argmax the runtime finds by name.
  EXPECT_NE(log_.str().find("codegen: 12 kernels for sm_80, sm_90a ("), std::string::npos)
      << log_.str();
  auto artifact = rt::Artifact::load(outDir_.string());
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  const schema::Plan &plan = (*artifact)->plan();
  ASSERT_NE(plan.targets(), nullptr);
  ASSERT_EQ(plan.targets()->size(), 3u);
  EXPECT_EQ(plan.targets()->Get(2)->str(), "sm_90a");
  ASSERT_NE(plan.cuda_version(), nullptr);
  EXPECT_NE(plan.cuda_version()->str().find('.'), std::string::npos);

  // One CUBIN per SM target plus one PTX for the lowest, each with the same kernel list.
  ASSERT_NE(plan.kernel_modules(), nullptr);
  ASSERT_EQ(plan.kernel_modules()->size(), 3u);
  std::map<std::string, schema::KernelFormat> formats;
  std::set<std::string> kernels;
  for (const schema::KernelModule *module : *plan.kernel_modules()) {
    formats[module->target()->str()] = module->format();
    EXPECT_GT(module->image()->size(), 1000u) << module->target()->str();
    std::set<std::string> names;
    for (const auto *name : *module->kernels())
      names.insert(name->str());
    EXPECT_EQ(names.size(), 12u) << module->target()->str();
    EXPECT_EQ(names.count(kernels::cuda::kArgmaxRowsSymbol), 1u) << module->target()->str();
    if (kernels.empty())
      kernels = names;
    EXPECT_EQ(names, kernels) << module->target()->str();
  }
  EXPECT_EQ(formats, (std::map<std::string, schema::KernelFormat>{
                         {"sm_80", schema::KernelFormat::Cubin},
                         {"sm_90a", schema::KernelFormat::Cubin},
                         {"compute_80", schema::KernelFormat::Ptx}}));
  EXPECT_TRUE(kernels.count("kiln_rms_norm_f32_64_32_f32"));
  EXPECT_TRUE(kernels.count("kiln_embedding_f32_64_32_f32"));
  EXPECT_TRUE(kernels.count("kiln_gemv_f32_64_f32"));
  EXPECT_TRUE(kernels.count("kiln_gemv_f32_128_f32"));

  const schema::Rank &rank = *plan.ranks()->Get(0);
  std::map<OpParams, std::string> kernelOf;
  for (const schema::Op *op : *rank.program()) {
    std::string kernel = op->kernel() ? op->kernel()->str() : "";
    ASSERT_NE(op->grid(), nullptr) << op->name()->str();
    if (op->params_type() == OpParams::LinearParams) {
      // cuBLASLt, or the GEMV for in-features = W's width; the runtime picks per row bucket.
      const schema::Buffer *w = rank.buffers()->Get(op->inputs()->Get(1));
      EXPECT_EQ(kernel, "kiln_gemv_f32_" + std::to_string(w->shape()->Get(1)) + "_f32")
          << op->name()->str();
      continue;
    }
    std::vector<std::string> parts = splitCommas(kernel);
    EXPECT_EQ(parts.size(), op->params_type() == OpParams::AttentionParams ? 3u : 1u)
        << op->name()->str() << ": " << kernel;
    for (const std::string &part : parts)
      EXPECT_TRUE(kernels.count(part)) << op->name()->str() << " names " << part;
    EXPECT_EQ(op->grid()->x_rows(), rank.buffers()->Get(op->outputs()->Get(0))->rows());
    EXPECT_EQ(op->grid()->x_per_block(), 1u);
    EXPECT_GT(op->grid()->block_x(), 0u);
    EXPECT_EQ(op->grid()->block_x() % 32, 0u) << op->name()->str();
    kernelOf[op->params_type()] = kernel;
  }
  EXPECT_EQ(kernelOf[OpParams::RmsNormParams], "kiln_rms_norm_f32_64_32_f32");
  EXPECT_EQ(kernelOf[OpParams::AttentionParams],
            "kiln_attention_prefill_16_f32_16_f32_4_2,kiln_attention_decode_16_f32_16_f32_4_2,"
            "kiln_attention_decode_reduce_f32_16_4");
  // Embedding, RmsNorm, AddRmsNorm, RopeKvWrite, Attention, SiluMul, GatherRows (Add is fused).
  EXPECT_EQ(kernelOf.size(), 7u);
}

// Half-precision weights give half activations; norm weights stay fp32 in the plan, so their
// kernels read fp32 weights while the embedding reads the stored bf16 table.
TEST_F(GpuKernelsTest, Bf16UsesHalfActivationsAndStoredWeightDtypes) {
  CompileOptions o = options({"cpu", "sm_80"});
  o.dtype = "bf16";
  Status status = compileModel(o);
  ASSERT_TRUE(status.isOk()) << status.toString();
  auto artifact = rt::Artifact::load(outDir_.string());
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  const schema::Plan &plan = (*artifact)->plan();
  ASSERT_EQ(plan.kernel_modules()->size(), 2u);
  std::set<std::string> kernels;
  for (const auto *name : *plan.kernel_modules()->Get(0)->kernels())
    kernels.insert(name->str());
  EXPECT_TRUE(kernels.count("kiln_rms_norm_bf16_64_32_f32")) << *kernels.begin();
  EXPECT_TRUE(kernels.count("kiln_embedding_bf16_64_32_bf16"));
  // The bf16 kernels run on what the plan describes: bf16 activations and KV cache, so every
  // kernel op's non-weight buffers share one dtype (the cuda backend's launch rule). Only the
  // lm_head, a library op, touches the fp32 logits.
  EXPECT_EQ(plan.activation_dtype(), schema::DType::BF16);
  EXPECT_EQ(plan.kv_cache()->dtype(), schema::DType::BF16);
  const schema::Rank &rank = *plan.ranks()->Get(0);
  int kernelOps = 0;
  for (const schema::Op *op : *rank.program()) {
    const bool linear = op->params_type() == OpParams::LinearParams;
    const std::string kernel = op->kernel() ? op->kernel()->str() : "";
    if (linear) // the bf16 GEMV; the lm_head's writes the fp32 logits
      EXPECT_EQ(kernel.rfind("kiln_gemv_bf16_", 0), 0u) << op->name()->str();
    if (op->name()->str() == "lm_head")
      EXPECT_EQ(kernel, "kiln_gemv_bf16_64_f32");
    bool library = linear || kernel.empty();
    kernelOps += !library;
    for (const auto *list : {op->inputs(), op->outputs()})
      for (uint32_t index : *list) {
        const schema::Buffer *b = rank.buffers()->Get(index);
        if (b->kind() != schema::BufferKind::Activation)
          continue;
        bool logits = index == rank.logits();
        EXPECT_EQ(b->dtype(), logits ? schema::DType::F32 : schema::DType::BF16)
            << op->name()->str() << " " << b->name()->str();
        if (logits)
          EXPECT_TRUE(library && op->name()->str() == "lm_head") << op->name()->str();
      }
  }
  // embed; per layer the two norms, rope_kv_write, attention and silu_mul; final norm, gather.
  EXPECT_EQ(kernelOps, 1 + 2 * 5 + 2);
}

TEST_F(GpuKernelsTest, UnknownTargetsNameTheFlag) {
  for (const char *target : {"sm_13", "sm_80x", "tpu", "compute_80"}) {
    Status status = compileModel(options({"cpu", target}));
    EXPECT_FALSE(status.isOk()) << target;
    EXPECT_NE(status.message().find(std::string("--target '") + target + "'"), std::string::npos)
        << status.toString();
    EXPECT_FALSE(fs::exists(outDir_)) << target;
  }
}

#else

TEST_F(GpuKernelsTest, SmTargetsNeedTheCodeGenerator) {
  Status status = compileModel(options({"cpu", "sm_80"}));
  EXPECT_EQ(status.message(), "target sm_80: the CUDA code generator is not built into this "
                              "kiln yet");
  EXPECT_FALSE(fs::exists(outDir_));
}

#endif

} // namespace
} // namespace kiln::compiler
