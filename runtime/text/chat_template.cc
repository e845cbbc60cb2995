#include "runtime/text/chat_template.h"

#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/text/jinja_ast.h"
#include "runtime/text/jinja_parser.h"
#include "runtime/text/jinja_renderer.h"

namespace kiln::rt {

struct ChatTemplateProgram {
  std::vector<jinja::StmtPtr> statements;
};

namespace {

using jinja::Value;

// Input JSON comes from requests; deeper nesting than this is not a chat message.
constexpr int kMaxJsonDepth = 128;

template <typename Json> Result<Value> toValue(const Json &json, int depth) {
  if (depth > kMaxJsonDepth)
    return invalidArgument("chat template input nested deeper than " +
                           std::to_string(kMaxJsonDepth) + " levels");
  switch (json.type()) {
  case nlohmann::json::value_t::null:
    return Value::none();
  case nlohmann::json::value_t::boolean:
    return Value::fromBool(json.template get<bool>());
  case nlohmann::json::value_t::number_integer:
    return Value::fromInt(json.template get<int64_t>());
  case nlohmann::json::value_t::number_unsigned: {
    auto u = json.template get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return invalidArgument("chat template input integer " + std::to_string(u) +
                             " does not fit in 64 bits");
    return Value::fromInt(static_cast<int64_t>(u));
  }
  case nlohmann::json::value_t::number_float:
    return Value::fromFloat(json.template get<double>());
  case nlohmann::json::value_t::string:
    return Value::fromString(json.template get<std::string>());
  case nlohmann::json::value_t::array: {
    std::vector<Value> items;
    for (const auto &item : json) {
      KILN_ASSIGN_OR_RETURN(Value v, toValue(item, depth + 1));
      items.push_back(std::move(v));
    }
    return Value::array(std::move(items));
  }
  case nlohmann::json::value_t::object: {
    jinja::ObjectData data;
    for (auto it = json.begin(); it != json.end(); ++it) {
      KILN_ASSIGN_OR_RETURN(Value v, toValue(it.value(), depth + 1));
      data.entries.emplace_back(it.key(), std::move(v));
    }
    return Value::object(std::move(data));
  }
  default:
    return invalidArgument("chat template input holds a binary JSON value");
  }
}

jinja::RenderOptions renderOptions(const std::function<std::tm()> &now, int64_t maxSteps,
                                   size_t maxWrittenBytes) {
  jinja::RenderOptions options;
  options.now = now;
  if (maxSteps > 0)
    options.maxSteps = maxSteps;
  if (maxWrittenBytes > 0)
    options.maxWrittenBytes = maxWrittenBytes;
  return options;
}

template <typename Json>
Result<std::string> renderJson(const ChatTemplateProgram &program, const Json &context,
                               const jinja::RenderOptions &options) {
  if (!context.is_object())
    return invalidArgument("chat template context must be a JSON object");
  KILN_ASSIGN_OR_RETURN(Value root, toValue(context, 0));
  return jinja::renderProgram(program.statements, root.asObject(), options);
}

// transformers' _alias_reasoning_fields: {"thinking": r, **message, "reasoning_content": r}.
nlohmann::ordered_json aliasReasoning(const nlohmann::ordered_json &message) {
  nlohmann::ordered_json reasoning;
  for (const char *key : {"reasoning_content", "thinking", "reasoning"}) {
    auto it = message.find(key);
    if (it != message.end() && !it->is_null()) {
      reasoning = *it;
      break;
    }
  }
  if (reasoning.is_null())
    return message;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["thinking"] = reasoning;
  for (auto it = message.begin(); it != message.end(); ++it)
    out[it.key()] = it.value();
  out["reasoning_content"] = reasoning;
  return out;
}

Result<std::string> tokenContent(const nlohmann::json &token, const std::string &field) {
  if (token.is_string())
    return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string())
    return token["content"].get<std::string>();
  return invalidArgument("tokenizer_config.json: field '" + field +
                         "' is neither a string nor an AddedToken object");
}

} // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string source) {
  KILN_ASSIGN_OR_RETURN(std::vector<jinja::StmtPtr> statements, jinja::parseTemplate(source));
  auto program = std::make_shared<ChatTemplateProgram>();
  program->statements = std::move(statements);
  ChatTemplate result;
  result.source_ = std::move(source);
  result.program_ = std::move(program);
  return result;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json &context) const {
  return renderJson(*program_, context, renderOptions(now_, maxSteps_, maxWrittenBytes_));
}

Result<std::string> ChatTemplate::render(const nlohmann::json &context) const {
  return renderJson(*program_, context, renderOptions(now_, maxSteps_, maxWrittenBytes_));
}

Result<std::string> ChatTemplate::renderChat(const nlohmann::ordered_json &messages,
                                             bool addGenerationPrompt,
                                             const ChatSpecialTokens &specialTokens) const {
  return renderChat(messages, addGenerationPrompt, specialTokens, nlohmann::ordered_json());
}

Result<std::string> ChatTemplate::renderChat(const nlohmann::ordered_json &messages,
                                             bool addGenerationPrompt,
                                             const ChatSpecialTokens &specialTokens,
                                             const nlohmann::ordered_json &extra) const {
  if (!messages.is_array())
    return invalidArgument("chat messages must be a JSON array");
  if (messages.empty())
    return invalidArgument("cannot apply a chat template to an empty conversation");
  if (!extra.is_null() && !extra.is_object())
    return invalidArgument("extra chat template variables must be a JSON object");
  nlohmann::ordered_json cleaned = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto &message = messages[i];
    if (!message.is_object())
      return invalidArgument("chat message " + std::to_string(i) + " is not a JSON object");
    nlohmann::ordered_json kept = nlohmann::ordered_json::object();
    for (auto it = message.begin(); it != message.end(); ++it)
      if (!it->is_null())
        kept[it.key()] = it.value();
    cleaned.push_back(aliasReasoning(kept));
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  for (const auto &[name, text] : specialTokens)
    context[name] = text;
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it)
      context[it.key()] = it.value();
  context["messages"] = std::move(cleaned);
  if (!context.contains("tools"))
    context["tools"] = nullptr;
  if (!context.contains("documents"))
    context["documents"] = nullptr;
  context["add_generation_prompt"] = addGenerationPrompt;
  return render(context);
}

Result<std::string> chatTemplateFromTokenizerConfig(std::string_view configJson,
                                                    std::string_view name) {
  nlohmann::json config = nlohmann::json::parse(configJson, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return invalidArgument("tokenizer_config.json is not a JSON object");
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    return notFound("tokenizer_config.json has no chat_template");
  if (it->is_string())
    return it->get<std::string>();
  if (!it->is_array())
    return invalidArgument("tokenizer_config.json: field 'chat_template' must be a string or a "
                           "list of {name, template}");
  for (const auto &entry : *it) {
    if (entry.is_object() && entry.value("name", "") == name && entry.contains("template") &&
        entry["template"].is_string())
      return entry["template"].get<std::string>();
  }
  return notFound("tokenizer_config.json: no chat_template named '" + std::string(name) + "'");
}

Result<ChatSpecialTokens> specialTokensFromTokenizerConfig(std::string_view configJson) {
  nlohmann::json config = nlohmann::json::parse(configJson, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return invalidArgument("tokenizer_config.json is not a JSON object");
  ChatSpecialTokens tokens;
  for (const char *field : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                            "cls_token", "mask_token"}) {
    auto it = config.find(field);
    if (it == config.end() || it->is_null())
      continue;
    KILN_ASSIGN_OR_RETURN(tokens[field], tokenContent(*it, field));
  }
  return tokens;
}

} // namespace kiln::rt
