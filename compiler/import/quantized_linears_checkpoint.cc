#include "compiler/import/quantized_linears_checkpoint.h"

#include <algorithm>

namespace kiln::compiler {

void QuantizedLinearsCheckpoint::listNames(const std::function<bool(const std::string &)> &isPart) {
  for (const std::string &name : stored_->names()) {
    if (weights_.count(name))
      continue; // listed below
    if (isPart(name))
      hidden_.insert(name);
    else
      names_.push_back(name);
  }
  for (const auto &[name, info] : weights_)
    names_.push_back(name);
  std::sort(names_.begin(), names_.end());
}

const TensorInfo *QuantizedLinearsCheckpoint::weight(const std::string &name) const {
  auto it = weights_.find(name);
  return it == weights_.end() ? nullptr : &it->second;
}

bool QuantizedLinearsCheckpoint::contains(const std::string &name) const {
  return weights_.count(name) || (!hidden_.count(name) && stored_->contains(name));
}

Result<const TensorInfo *> QuantizedLinearsCheckpoint::info(const std::string &name) const {
  if (const TensorInfo *info = weight(name))
    return info;
  if (hidden_.count(name))
    return notFound("tensor '" + name + "' is part of a quantized linear's weight (" + form_ + ")");
  return stored_->info(name);
}

std::vector<std::string> QuantizedLinearsCheckpoint::names() const {
  return names_;
}

Result<std::span<const uint8_t>>
QuantizedLinearsCheckpoint::rawBytes(const std::string &name) const {
  if (weights_.count(name))
    return invalidArgument("tensor '" + name + "' is stored quantized (" + form_ +
                           "): it has no raw bytes");
  return stored_->rawBytes(name);
}

} // namespace kiln::compiler
