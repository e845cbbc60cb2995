// What the quantized-checkpoint readers share (hf_quantized_checkpoint.h: GPTQ / AWQ,
// hf_fp8_checkpoint.h: fp8): a Checkpoint over the stored one in which each quantized linear shows
// as an ordinary "<linear>.weight" tensor [out, in] (fp32, not raw-readable: its values come
// through the reader's readF32 / readPacked) and the stored parts it is made of (packed words,
// scales, zero points) are hidden; every other tensor passes through.
#pragma once

#include "compiler/import/checkpoint.h"

#include <functional>
#include <map>
#include <memory>
#include <set>

namespace kiln::compiler {

class QuantizedLinearsCheckpoint : public Checkpoint {
public:
  bool contains(const std::string &name) const override;
  Result<const TensorInfo *> info(const std::string &name) const override;
  std::vector<std::string> names() const override;
  Result<std::span<const uint8_t>> rawBytes(const std::string &name) const override;

  // Linears read as quantized.
  size_t quantizedLinears() const { return weights_.size(); }

protected:
  // `form` names the stored form in messages ("gptq", "fp8", ...).
  QuantizedLinearsCheckpoint(std::shared_ptr<const Checkpoint> stored, std::string form)
      : stored_(std::move(stored)), form_(std::move(form)) {}

  // A quantized linear's weight, under info.name.
  void addWeight(const TensorInfo &info) { weights_[info.name] = info; }
  // Once every weight is added: the stored tensors for which isPart holds are hidden, the rest and
  // the weights are the names, sorted.
  void listNames(const std::function<bool(const std::string &)> &isPart);
  // The weight's info, or null for a tensor that passes through.
  const TensorInfo *weight(const std::string &name) const;

  std::shared_ptr<const Checkpoint> stored_;

private:
  std::string form_;
  std::map<std::string, TensorInfo> weights_;
  std::vector<std::string> names_;
  std::set<std::string> hidden_;
};

} // namespace kiln::compiler
