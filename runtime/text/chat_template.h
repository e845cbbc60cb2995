// Chat templates: renders Hugging Face chat templates (Jinja) byte-identically to
// transformers' apply_chat_template(tokenize=False), using kiln's own Jinja subset renderer.
//
//   KILN_ASSIGN_OR_RETURN(auto tmpl, ChatTemplate::parse(source));
//   KILN_ASSIGN_OR_RETURN(std::string prompt,
//                         tmpl.renderChat(messages, /*addGenerationPrompt=*/true,
//                                         {{"bos_token", "<s>"}, {"eos_token", "</s>"}}));
//
// Key order matters for byte identity (tojson prints keys in the caller's order), so the main
// entry points take nlohmann::ordered_json; a plain nlohmann::json context renders with its keys
// sorted, as nlohmann stores them.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/status.h"

namespace kiln::rt {

// Special tokens a template may print, by their tokenizer_config name: "bos_token" -> "<s>".
using ChatSpecialTokens = std::map<std::string, std::string>;

struct ChatTemplateProgram;

class ChatTemplate {
public:
  // Parses once; fails with the line and construct for syntax errors or unsupported tags.
  static Result<ChatTemplate> parse(std::string source);

  // Renders with exactly `context` as the template's variables (messages, add_generation_prompt,
  // bos_token, tools, ...). `context` must be a JSON object.
  Result<std::string> render(const nlohmann::ordered_json &context) const;
  Result<std::string> render(const nlohmann::json &context) const;

  // apply_chat_template semantics: drops null-valued message keys, aliases reasoning fields
  // (reasoning_content/thinking/reasoning), passes tools and documents as None unless `extra`
  // sets them, and adds the special tokens. `extra` (an object, or null) holds further template
  // variables such as tools, documents or date_string.
  Result<std::string> renderChat(const nlohmann::ordered_json &messages, bool addGenerationPrompt,
                                 const ChatSpecialTokens &specialTokens,
                                 const nlohmann::ordered_json &extra) const;
  Result<std::string> renderChat(const nlohmann::ordered_json &messages, bool addGenerationPrompt,
                                 const ChatSpecialTokens &specialTokens) const;

  // The local time strftime_now() reads; tests fix it for deterministic dates.
  void setClock(std::function<std::tm()> now) { now_ = std::move(now); }
  // Loop iterations plus macro calls allowed in one render (jinja_renderer.h RenderOptions);
  // tests/fuzz/chat_template_fuzz.cc lowers it so that a runaway template fails in seconds
  // under the sanitizers.
  void setStepLimit(int64_t steps) { maxSteps_ = steps; }
  // Bytes written over one render, macro outputs included (RenderOptions::maxWrittenBytes); the
  // fuzz target lowers it too (repr of a large string is slow under the sanitizers).
  void setWrittenByteLimit(size_t bytes) { maxWrittenBytes_ = bytes; }

  const std::string &source() const { return source_; }

private:
  ChatTemplate() = default;

  std::string source_;
  std::shared_ptr<const ChatTemplateProgram> program_;
  std::function<std::tm()> now_;
  int64_t maxSteps_ = 0;     // 0: jinja_renderer.h RenderOptions' default
  size_t maxWrittenBytes_ = 0; // 0: jinja_renderer.h RenderOptions' default
};

// The chat template in a tokenizer_config.json: its `chat_template` string, or the entry called
// `name` when it is a list of {name, template}. NotFound when the config has none.
Result<std::string> chatTemplateFromTokenizerConfig(std::string_view configJson,
                                                    std::string_view name = "default");

// bos/eos/unk/sep/pad/cls/mask tokens from a tokenizer_config.json (string or AddedToken form).
Result<ChatSpecialTokens> specialTokensFromTokenizerConfig(std::string_view configJson);

} // namespace kiln::rt
