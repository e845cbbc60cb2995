// `kiln compile MODEL -o OUT.kiln [options]`: a thin main over compiler::compileModel.
#include "compiler/driver/compile.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/kv_calibration.h"

#include <iostream>
#include <sstream>

namespace kiln::tools {
namespace {

const CommandSpec kCompileSpec = {
    "compile",
    "MODEL -o OUT.kiln [options]",
    "Compile a model into a kiln artifact directory (plan.kiln, weights.rank0.bin, manifest.json,\n"
    "tokenizer files). MODEL is a Hugging Face model directory (config.json, *.safetensors,\n"
    "tokenizer files), or a GGUF file (MODEL.gguf, the first part NAME-00001-of-0000N.gguf of a\n"
    "split one, or a directory holding one), whose tokenizer and chat template come from its\n"
    "metadata. A GGUF file's Q8_0, Q4_0 and Q4_1 matrices stay packed, for every target (kiln\n"
    "inspect shows each weight's format); other blocks, and all of them when --dtype is given,\n"
    "are dequantized into --dtype.",
    {
        {"-o", "OUT.kiln", "artifact directory to write (replaced only when compiling succeeds)"},
        {"--output", "OUT.kiln", "same as -o"},
        {"--max-batch", "N", "max concurrent sequences per step (default 8)"},
        {"--max-seq-len", "N",
         "max tokens per sequence (default min(max_position_embeddings x the linear, dynamic or "
         "yarn "
         "rope factor, 4096))"},
        {"--max-tokens-per-step", "N", "max tokens in one step (default max(max-batch, 2048))"},
        {"--max-logits-per-step", "N",
         "logits rows the plan holds per step (default max(max-batch, 64)); more are run in "
         "pieces"},
        {"--tp", "N", "tensor-parallel degree (default 1)"},
        {"--dtype", "fp32|fp16|bf16", "weights, activations, KV cache (default fp32)"},
        {"--kv-dtype", "fp32|fp16|bf16|fp8",
         "KV cache dtype (default: as --dtype); fp8 applies the checkpoint's calibrated k_scale / "
         "v_scale when it has them"},
        {"--kv-calibration", "FILE",
         "with --kv-dtype fp8: calibrate each layer's k / v scale on these prompts instead (JSON "
         "Lines: a text or an array of token ids a line; the largest |k| and |v| the cache holds "
         "x 1.25 / 448); compiles twice, the first time for the cpu to measure"},
        {"--quantize", "int8|int4|fp8",
         "store every weight matrix quantized, rounded to nearest (int8: a scale per group or row, "
         "int4: 4-bit with a scale per group, fp8: E4M3 with a scale per group or row), for "
         "every target"},
        {"--group-size", "N",
         "columns per scale for --quantize, a multiple of 32 (default: int8 and fp8 one per row, "
         "int4 32)"},
        {"--target", "LIST", "comma-separated targets (default cpu)"},
        {"--kv-block-size", "N", "tokens per KV cache block, a power of two (default 16)"},
        {"--dump-ir", "", "print the kiln MLIR module after each pass to stderr"},
        {"--quiet", "", "no progress output"},
    },
    1,
    1,
};

std::vector<std::string> splitList(const std::string &text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ','))
    if (!item.empty())
      items.push_back(item);
  return items;
}

Result<compiler::CompileOptions> optionsFromArgs(const Args &args) {
  compiler::CompileOptions options;
  options.modelDir = args.positionals()[0];
  options.outDir = args.getOr("-o", args.getOr("--output", ""));
  if (options.outDir.empty())
    return invalidArgument("missing -o OUT.kiln (the artifact directory to write)");
  // Range checks that depend on the model happen in the compiler; these only parse.
  KILN_ASSIGN_OR_RETURN(options.maxBatch, args.getInt("--max-batch", 8, INT64_MIN, INT64_MAX));
  KILN_ASSIGN_OR_RETURN(options.maxSeqLen, args.getInt("--max-seq-len", 0, INT64_MIN, INT64_MAX));
  KILN_ASSIGN_OR_RETURN(options.maxTokensPerStep,
                        args.getInt("--max-tokens-per-step", 0, INT64_MIN, INT64_MAX));
  KILN_ASSIGN_OR_RETURN(options.maxLogitsPerStep,
                        args.getInt("--max-logits-per-step", 0, INT64_MIN, INT64_MAX));
  KILN_ASSIGN_OR_RETURN(options.tp, args.getInt("--tp", 1, INT64_MIN, INT64_MAX));
  KILN_ASSIGN_OR_RETURN(options.kvBlockSize,
                        args.getInt("--kv-block-size", 16, INT64_MIN, INT64_MAX));
  options.dtype = args.getOr("--dtype", "fp32");
  options.keepGgufBlocks = !args.has("--dtype");
  options.kvDtype = args.getOr("--kv-dtype", "");
  options.quantize = args.getOr("--quantize", "");
  KILN_ASSIGN_OR_RETURN(options.groupSize, args.getInt("--group-size", 0, INT64_MIN, INT64_MAX));
  if (auto targets = args.get("--target"))
    options.targets = splitList(*targets);
  options.dumpIr = args.has("--dump-ir");
  options.log = args.has("--quiet") && !options.dumpIr ? nullptr : &std::cerr;
  return options;
}

} // namespace

int runCompile(const CommandArgs &argv) {
  Result<Args> args = Args::parse(kCompileSpec, argv);
  if (!args.isOk())
    return reportError("compile", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(kCompileSpec)
              << "\nmodel_type (config.json): " << compiler::supportedModelTypes()
              << " (Llama 1/2/3, Mistral, Qwen2/2.5, Qwen3, Phi-3/3.5, Gemma 2, Gemma 3 text, "
                 "Mixtral, Qwen3-MoE, Qwen2-MoE; embedding models: BERT, XLM-RoBERTa, BART)\n"
              << "general.architecture (GGUF): " << compiler::supportedGgufArchitectures() << "\n";
    return 0;
  }
  Result<compiler::CompileOptions> options = optionsFromArgs(*args);
  if (!options.isOk())
    return reportError("compile", options.status());
  const std::optional<std::string> calibration = args->get("--kv-calibration");
  Status status = calibration ? compileWithKvCalibration(*options, *calibration)
                              : compiler::compileModel(*options);
  if (!status.isOk())
    return reportError("compile", status);
  std::cerr << "kiln compile: wrote " << options->outDir << "\n";
  return 0;
}

} // namespace kiln::tools
