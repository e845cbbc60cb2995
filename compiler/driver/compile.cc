// The compile pipeline: flags -> config -> builder -> bind weights -> passes -> plan -> artifact.
// MLIR diagnostics are collected and returned as one Status at this boundary (never thrown).
#include "compiler/driver/compile.h"

#include "compiler/driver/gpu_kernels.h"
#include "compiler/driver/options.h"
#include "compiler/emit/plan_emitter.h"
#include "compiler/emit/weight_sources.h"
#include "compiler/import/config_fields.h"
#include "compiler/import/gguf_model.h"
#include "compiler/import/hf_fp8_checkpoint.h"
#include "compiler/import/hf_quantized_checkpoint.h"
#include "compiler/import/kv_cache_scales.h"
#include "compiler/import/safetensors.h"
#include "compiler/import/sentence_transformers.h"
#include "compiler/models/model_family.h"
#include "compiler/transforms/passes.h"
#include "compiler/transforms/quantize_weights.h"
#include "runtime/base/file.h"
#include "runtime/ops/plan_types.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_os_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

namespace kiln::compiler {
namespace {

// Collects error diagnostics as "<op name>: <message>" lines.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext &context)
      : handler_(&context, [this](mlir::Diagnostic &diag) {
          if (diag.getSeverity() == mlir::DiagnosticSeverity::Error) {
            std::string message = diag.str(), where;
            // Prefix the op's name unless the message already names it.
            if (auto name = mlir::dyn_cast<mlir::NameLoc>(diag.getLocation());
                name && message.find(name.getName().strref()) == std::string::npos)
              where = name.getName().str() + ": ";
            messages_ += (messages_.empty() ? "" : "; ") + where + message;
          }
          return mlir::success();
        }) {}
  Status status(StatusCode code, const std::string &stage) const {
    return Status(code, stage + ": " + (messages_.empty() ? "failed" : messages_));
  }

private:
  std::string messages_;
  mlir::ScopedDiagnosticHandler handler_;
};

// Logs one line per pass with the op count of @step, so a fusion's effect is visible.
class ProgressInstrumentation : public mlir::PassInstrumentation {
public:
  explicit ProgressInstrumentation(std::ostream &log) : log_(log) {}
  void runAfterPass(mlir::Pass *pass, mlir::Operation *op) override {
    int64_t count = 0;
    op->walk([&](mlir::Operation *) { ++count; });
    log_ << "  pass " << pass->getArgument().str() << ": " << count << " ops\n";
  }

private:
  std::ostream &log_;
};

class Compilation {
public:
  explicit Compilation(const CompileOptions &options) : options_(options), diagnostics_(context_) {
    context_.disableMultithreading(); // IR printing after each pass needs it; 1 module anyway
    loadKilnDialects(context_);
  }
  Status run();

private:
  void log(const std::string &line) {
    if (options_.log)
      *options_.log << line << "\n";
  }
  Status import();
  Status readKvCacheScales();
  Status useCalibratedKvScales();
  Status checkKvScalesFit(const std::string &source) const;
  Status build();
  Status markQuantizedWeights();
  Status runPasses();
  Status runPasses(int64_t rank, mlir::ModuleOp module);
  Status emit();

  CompileOptions options_;
  mlir::MLIRContext context_;
  DiagnosticCollector diagnostics_;
  HfModelConfig config_;
  const ModelFamily *family_ = nullptr;
  std::unique_ptr<GgufModel> gguf_; // a GGUF compile: staged config/tokenizer files + tensors
  std::string configDir_;           // where config.json and the tokenizer files are read
  std::shared_ptr<const Checkpoint> checkpoint_;
  KvCacheScales kvScales_; // applied (k, v not empty) only with --kv-dtype fp8
  mlir::OwningOpRef<mlir::ModuleOp> module_;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> rankCopies_; // ranks 1.. of a tp > 1 compile
  std::vector<mlir::ModuleOp> rankModules_;                   // every rank, in order
};

Status Compilation::import() {
  KILN_RETURN_IF_ERROR(validateCompileFlags(options_));
  log("kiln compile " + options_.modelDir + " -> " + options_.outDir);
  configDir_ = options_.modelDir;
  if (isGgufPath(options_.modelDir)) {
    KILN_ASSIGN_OR_RETURN(gguf_, GgufModel::open(options_.modelDir, options_.log));
    configDir_ = gguf_->stagingDir();
    checkpoint_ = gguf_->checkpoint();
  }
  // The family first: it says how its config reads (rope type aliases) and reads its own keys.
  const std::string configPath = configDir_ + "/config.json";
  if (!fileExists(configPath))
    return notFound(configPath + ": not found (a Hugging Face model directory needs config.json; "
                                 "a GGUF model is a .gguf file)");
  KILN_ASSIGN_OR_RETURN(std::string configText, readFile(configPath));
  KILN_ASSIGN_OR_RETURN(ConfigFields written, ConfigFields::parse(configText, configPath));
  KILN_ASSIGN_OR_RETURN(family_, findModelFamily(written));
  KILN_ASSIGN_OR_RETURN(configText, familyConfigJson(*family_, configText, configPath));
  KILN_ASSIGN_OR_RETURN(ConfigFields fields, ConfigFields::parse(configText, configPath));
  KILN_ASSIGN_OR_RETURN(config_,
                        loadHfModelConfig(configDir_, family_->ropeTypeAliases, &configText));
  KILN_RETURN_IF_ERROR(family_->parseConfig(fields, config_));
  // A checkpoint with sentence-transformers' Pooling is an embedding model whatever its
  // architectures say (Qwen3-Embedding's config names Qwen3ForCausalLM).
  KILN_ASSIGN_OR_RETURN(SentencePooling pooling, readSentencePooling(configDir_));
  config_.embeds = config_.embeds || !pooling.mode.empty();
  KILN_ASSIGN_OR_RETURN(options_, resolveCompileOptions(options_, config_));
  if (!checkpoint_) {
    KILN_ASSIGN_OR_RETURN(SafetensorsCheckpoint checkpoint,
                          SafetensorsCheckpoint::open(options_.modelDir));
    checkpoint_ = std::make_shared<const SafetensorsCheckpoint>(std::move(checkpoint));
  }
  KILN_RETURN_IF_ERROR(readKvCacheScales()); // the fp8 view below does not list them
  if (config_.quantization && config_.quantization->method == HfQuantization::Method::kFp8) {
    const HfQuantization &q = *config_.quantization;
    KILN_ASSIGN_OR_RETURN(auto fp8, HfFp8Checkpoint::create(checkpoint_, q));
    const std::string scales = q.blockRows == 0 ? "one scale per tensor"
                               : q.blockColumns == 0
                                   ? "one scale per output channel"
                                   : "a scale per [" + std::to_string(q.blockRows) + ", " +
                                         std::to_string(q.blockColumns) + "] block";
    // Kept in fp8 (Q8F32, every target reads it) where the blocks are whole groups and no --dtype
    // asks for a float copy; the rest dequantized.
    const size_t kept = options_.keepGgufBlocks ? fp8->packableLinears() : 0;
    const size_t dequantized = fp8->quantizedLinears() - kept;
    std::string fate;
    if (kept)
      fate = std::to_string(kept) + " kept in fp8 (Q8F32: fp32 scales)";
    if (dequantized)
      fate += std::string(kept ? ", " : "") + std::to_string(dequantized) + " dequantized to " +
              options_.dtype +
              (options_.keepGgufBlocks
                   ? " (their scale blocks are not a multiple of 32 columns dividing the row)"
                   : " (--dtype)");
    log(std::string("import: ") + (q.compressedTensors ? "compressed-tensors fp8" : "fp8") +
        " checkpoint, " + std::to_string(fp8->quantizedLinears()) + " linears with " + scales +
        ": " + fate);
    checkpoint_ = std::move(fp8);
  } else if (config_.quantization) {
    KILN_ASSIGN_OR_RETURN(auto quantized,
                          HfQuantizedCheckpoint::create(checkpoint_, *config_.quantization));
    const HfQuantization &q = *config_.quantization;
    log("import: " + std::string(q.methodName()) + " checkpoint, " +
        std::to_string(quantized->quantizedLinears()) + " quantized linears, group size " +
        (q.groupSize ? std::to_string(q.groupSize) : std::string("per output")) +
        (q.method == HfQuantization::Method::kGptq && q.symmetric
             ? " (symmetric: kept packed as Q4 on a cpu-only compile)"
             : " (zero points: kept packed as Q4Z on a cpu-only compile)"));
    checkpoint_ = std::move(quantized);
  }
  log("import: " + config_.modelType + " (" + config_.architecture + "), " +
      std::to_string(config_.numLayers) + " layers, hidden " + std::to_string(config_.hiddenSize) +
      ", vocab " + std::to_string(config_.vocabSize) + "; limits: max-batch " +
      std::to_string(options_.maxBatch) + ", max-seq-len " + std::to_string(options_.maxSeqLen) +
      ", max-tokens-per-step " + std::to_string(options_.maxTokensPerStep));
  return okStatus();
}

// A checkpoint's calibrated KV-cache scales (compiler/import/kv_cache_scales.h): applied to an
// fp8 cache, where every layer must have both; else passed over with a note.
Status Compilation::readKvCacheScales() {
  if (!options_.kvKScales.empty() || !options_.kvVScales.empty())
    return useCalibratedKvScales();
  KILN_ASSIGN_OR_RETURN(kvScales_, findKvCacheScales(*checkpoint_, config_.numLayers));
  const std::string count = std::to_string(kvScales_.tensors);
  if (kvScales_.tensors == 0)
    return okStatus();
  if (options_.kvDtype != "fp8") {
    kvScales_.k.clear();
    kvScales_.v.clear();
    log("import: note: the checkpoint's " + count +
        " calibrated k_scale / v_scale tensors (kv_cache_scheme) are not applied: they scale an "
        "fp8 KV cache (--kv-dtype fp8)");
    return okStatus();
  }
  if (kvScales_.k.empty())
    return invalidArgument(
        "checkpoint: --kv-dtype fp8 applies the checkpoint's calibrated KV-cache "
        "scales, and it has " +
        count + " of the " + std::to_string(2 * config_.numLayers) +
        " (k_scale and v_scale of each layer); '" + kvScales_.firstMissing + "' is missing");
  KILN_RETURN_IF_ERROR(checkKvScalesFit("checkpoint: "));
  log("import: the checkpoint's calibrated k_scale / v_scale of " +
      std::to_string(config_.numLayers) + " layers scale the fp8 KV cache");
  return okStatus();
}

// Whether per-layer KV-cache scales fit the model: not an encoder-decoder's (its decoder's self-
// and cross-attention caches have no such scales); `source` prefixes the error.
Status Compilation::checkKvScalesFit(const std::string &source) const {
  if (config_.decoderLayers > 0)
    return invalidArgument(source + "calibrated KV-cache scales of an encoder-decoder (" +
                           config_.architecture + ") are not supported");
  return okStatus();
}

// Scales kiln calibrated (CompileOptions::kvKScales): one finite positive value per layer each,
// for an fp8 cache; they take the place of any the checkpoint stores.
Status Compilation::useCalibratedKvScales() {
  const std::string layers = std::to_string(config_.numLayers);
  if (options_.kvDtype != "fp8")
    return invalidArgument("calibrated KV-cache scales scale an fp8 cache: give --kv-dtype fp8");
  for (const std::vector<float> *scales : {&options_.kvKScales, &options_.kvVScales}) {
    if (static_cast<int64_t>(scales->size()) != config_.numLayers)
      return invalidArgument("calibrated KV-cache scales: " + std::to_string(scales->size()) +
                             " values for the model's " + layers + " layers");
    for (float s : *scales)
      if (!std::isfinite(s) || s <= 0)
        return invalidArgument("calibrated KV-cache scales: " + std::to_string(s) +
                               " is not a finite positive value");
  }
  KILN_RETURN_IF_ERROR(checkKvScalesFit(""));
  kvScales_.k = options_.kvKScales;
  kvScales_.v = options_.kvVScales;
  log("import: kiln's calibrated k / v scales of " + layers + " layers scale the fp8 KV cache");
  return okStatus();
}

Status Compilation::build() {
  mlir::Builder types(&context_);
  BuildOptions buildOptions;
  buildOptions.weightType = options_.dtype == "fp16"   ? types.getF16Type()
                            : options_.dtype == "bf16" ? types.getBF16Type()
                                                       : types.getF32Type();
  buildOptions.hasTensor = [this](const std::string &name) { return checkpoint_->contains(name); };
  auto module = family_->build(context_, config_, buildOptions);
  if (failed(module))
    return diagnostics_.status(StatusCode::kInvalidArgument,
                               "building the " + config_.modelType + " graph");
  module_ = std::move(*module);
  if (failed(bindWeightSources(*module_, *checkpoint_)))
    return diagnostics_.status(StatusCode::kInvalidArgument, "checkpoint");
  log("build: " + std::string(family_->name) + " graph built");
  return markQuantizedWeights();
}

// --quantize, or a GGUF file's or a GPTQ / AWQ checkpoint's packed blocks kept (every target reads
// them: the cpu kernels and kernels/cuda/quant.cuh).
Status Compilation::markQuantizedWeights() {
  QuantizePolicy policy;
  if (!options_.quantize.empty()) {
    // int8 and fp8: one scale per row unless a group is given; int4: groups of 32.
    const QuantFormat format = options_.quantize == "int8"  ? QuantFormat::kQ8
                               : options_.quantize == "fp8" ? QuantFormat::kQ8Float
                                                            : QuantFormat::kQ4;
    policy.all = WeightQuant{format, options_.groupSize           ? options_.groupSize
                                     : format == QuantFormat::kQ4 ? kDefaultInt4GroupSize
                                                                  : 0};
  } else if ((gguf_ || config_.quantization) && options_.keepGgufBlocks) {
    policy.packedFrom = checkpoint_.get();
  }
  if (!policy.all && !policy.packedFrom)
    return okStatus();
  if (failed(quantizeWeights(*module_, policy)))
    return diagnostics_.status(StatusCode::kInvalidArgument, "quantizing the weights");
  return okStatus();
}

// Rank `rank`'s pipeline on its own copy of the built module: shard (tp > 1), fuse, plan memory.
Status Compilation::runPasses(int64_t rank, mlir::ModuleOp module) {
  auto pm = mlir::PassManager::on<mlir::ModuleOp>(&context_);
  pm.enableVerifier(true);
  std::unique_ptr<llvm::raw_os_ostream> irStream;
  if (options_.dumpIr && options_.log) {
    irStream = std::make_unique<llvm::raw_os_ostream>(*options_.log);
    irStream->SetUnbuffered(); // progress lines go to the same std::ostream: keep the order
    if (rank == 0) {
      *irStream << "// ----- built module -----\n";
      module.print(*irStream);
      *irStream << "\n";
    }
    irStream->flush();
    pm.enableIRPrinting([](mlir::Pass *, mlir::Operation *) { return false; },
                        [](mlir::Pass *, mlir::Operation *) { return true; },
                        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
                        /*printAfterOnlyOnFailure=*/false, *irStream);
  }
  if (options_.log)
    pm.addInstrumentation(std::make_unique<ProgressInstrumentation>(*options_.log));
  if (options_.tp > 1)
    pm.addPass(createShardTensorParallelPass(rank, options_.tp));
  pm.addPass(createFuseQkvPass());
  pm.addPass(createFuseGateUpPass());
  pm.addPass(createFuseAddRmsNormPass());
  pm.addPass(createPlanMemoryPass(options_.maxTokensPerStep, options_.maxLogitsPerStep));
  mlir::LogicalResult result = pm.run(module);
  if (irStream)
    irStream->flush();
  std::string where = options_.tp > 1 ? " (rank " + std::to_string(rank) + ")" : "";
  if (failed(result))
    return diagnostics_.status(StatusCode::kInternal, "pass pipeline" + where);
  // Shards are new weight sources: check them against the checkpoint like the built ones.
  if (options_.tp > 1 && failed(bindWeightSources(module, *checkpoint_)))
    return diagnostics_.status(StatusCode::kInternal, "sharded weights" + where);
  auto step = module.lookupSymbol<mlir::func::FuncOp>("step");
  auto arena = step->getAttrOfType<mlir::IntegerAttr>(kArenaBytesAttr);
  log("memory plan" + where + ": activation arena " + std::to_string(arena.getInt()) +
      " bytes at " + std::to_string(options_.maxTokensPerStep) + " tokens and " +
      std::to_string(options_.maxLogitsPerStep) + " logits rows per step");
  return okStatus();
}

Status Compilation::runPasses() {
  // Rank 0 transforms the built module itself; the others start from copies made before it.
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> copies;
  for (int64_t r = 1; r < options_.tp; ++r)
    copies.emplace_back(module_->clone());
  KILN_RETURN_IF_ERROR(runPasses(0, *module_));
  rankModules_.push_back(*module_);
  for (int64_t r = 1; r < options_.tp; ++r) {
    KILN_RETURN_IF_ERROR(runPasses(r, *copies[r - 1]));
    rankModules_.push_back(*copies[r - 1]);
  }
  rankCopies_ = std::move(copies);
  return okStatus();
}

Status Compilation::emit() {
  EmitOptions emitOptions;
  emitOptions.modelDir = configDir_;
  emitOptions.maxBatch = options_.maxBatch;
  emitOptions.maxSeqLen = options_.maxSeqLen;
  emitOptions.maxTokensPerStep = options_.maxTokensPerStep;
  emitOptions.maxLogitsPerStep = options_.maxLogitsPerStep;
  emitOptions.kvBlockSize = options_.kvBlockSize;
  emitOptions.kvDtype = options_.kvDtype;
  emitOptions.kvKScales = kvScales_.k;
  emitOptions.kvVScales = kvScales_.v;
  emitOptions.tp = options_.tp;
  emitOptions.targets = options_.targets;
  auto contents = emitArtifactContents(rankModules_, config_, checkpoint_, emitOptions);
  if (failed(contents))
    return diagnostics_.status(StatusCode::kInternal, "emitting the plan");
  KILN_RETURN_IF_ERROR(attachGpuKernels(options_, config_, contents->plan, options_.log));
  uint64_t weightBytes = 0;
  std::map<std::string, int> quantized; // "Q4M g32" -> weights of rank 0 stored so
  for (const auto &rankWeights : contents->rankWeights)
    for (const rt::WeightSource &weight : rankWeights) {
      weightBytes += rt::weightSize(weight.dtype, weight.shape, weight.groupSize).bytes;
      if (rt::isQuantDType(weight.dtype) && &rankWeights == &contents->rankWeights[0])
        ++quantized[rt::weightFormatName(weight.dtype, weight.groupSize)];
    }
  std::string stored = options_.dtype;
  for (const auto &[form, count] : quantized)
    stored += ", " + std::to_string(count) + (count == 1 ? " matrix " : " matrices ") + form;
  if (!options_.kvDtype.empty() && options_.kvDtype != options_.dtype)
    stored += ", KV cache " + options_.kvDtype;
  size_t numWeights = contents->rankWeights[0].size();
  size_t numOps = contents->plan.ranks[0]->program.size();
  // The writer reports every tensor; a 7B model has hundreds, so per-tensor lines are kept to
  // about one a second (other lines, such as the final "wrote ...", always pass).
  rt::ProgressFn progress;
  auto lastLine = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  if (options_.log)
    progress = [this, &lastLine](const std::string &message) {
      auto now = std::chrono::steady_clock::now();
      if (message.find(" tensors") != std::string::npos && now - lastLine < std::chrono::seconds(1))
        return;
      lastLine = now;
      log("  " + message);
    };
  KILN_RETURN_IF_ERROR(rt::writeArtifact(*contents, options_.outDir, progress)
                           .withContext("writing " + options_.outDir));
  std::string perRank =
      options_.tp > 1 ? " per rank x " + std::to_string(options_.tp) + " ranks" : "";
  log("emit: " + std::to_string(numOps) + " ops, " + std::to_string(numWeights) + " weights" +
      perRank + " (" + std::to_string(weightBytes) +
      (options_.tp > 1 ? " bytes in all, " : " bytes, ") + stored + ") written to " +
      options_.outDir);
  return okStatus();
}

Status Compilation::run() {
  KILN_RETURN_IF_ERROR(import());
  KILN_RETURN_IF_ERROR(build());
  KILN_RETURN_IF_ERROR(runPasses());
  return emit();
}

} // namespace

Status compileModel(const CompileOptions &options) {
  return Compilation(options).run();
}

} // namespace kiln::compiler
