#include "runtime/serve/tool_request.h"

#include "runtime/serve/structured_request.h"
#include "runtime/structured/grammar_cache.h"
#include "runtime/structured/json_schema_grammar.h"

#include <random>

namespace kiln::rt::serve {
namespace {

using OrderedJson = nlohmann::ordered_json;

// A function's parameters schema; a tool without one takes any object.
OrderedJson parametersOf(const OrderedJson &tool) {
  const OrderedJson &function = tool["function"];
  auto params = function.find("parameters");
  if (params == function.end() || params->is_null())
    return OrderedJson{{"type", "object"}};
  return *params;
}

// Checks `tools` and returns the functions' names in order.
std::vector<std::string> checkTools(JsonFields &f, const OrderedJson &tools) {
  std::vector<std::string> names;
  if (!tools.is_array()) {
    f.fail("tools", "field 'tools' must be an array of {\"type\": \"function\", \"function\": "
                    "{...}} objects");
    return names;
  }
  for (size_t i = 0; i < tools.size() && f.ok(); ++i) {
    const OrderedJson &tool = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    auto type = tool.is_object() ? tool.find("type") : tool.end();
    if (!tool.is_object() || type == tool.end() || *type != "function") {
      f.fail(at + ".type", "field '" + at + ".type' must be \"function\"");
      break;
    }
    auto function = tool.find("function");
    if (function == tool.end() || !function->is_object()) {
      f.fail(at + ".function", "field '" + at + ".function' must be an object");
      break;
    }
    auto name = function->find("name");
    if (name == function->end() || !name->is_string() || name->get<std::string>().empty()) {
      f.fail(at + ".function.name", "field '" + at + ".function.name' must be a non-empty string");
      break;
    }
    auto params = function->find("parameters");
    if (params != function->end() && !params->is_null() && !params->is_object()) {
      f.fail(at + ".function.parameters",
             "field '" + at + ".function.parameters' must be a JSON schema object");
      break;
    }
    names.push_back(name->get<std::string>());
  }
  return names;
}

std::string joined(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

// tool_choice -> settings; `names` are the tools' function names.
void readChoice(JsonFields &f, const OrderedJson &ordered, const std::vector<std::string> &names,
                ToolSettings &tools) {
  tools.choice = names.empty() ? ToolSettings::Choice::kNone : ToolSettings::Choice::kAuto;
  auto choice = ordered.find("tool_choice");
  if (choice == ordered.end() || choice->is_null())
    return;
  if (*choice == "none") {
    tools.choice = ToolSettings::Choice::kNone;
    return;
  }
  if (*choice == "auto")
    return;
  bool named = choice->is_object() && choice->value("type", "") == "function" &&
               choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") && (*choice)["function"]["name"].is_string();
  if (*choice != "required" && !named)
    return f.fail("tool_choice", "field 'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                 "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  if (names.empty())
    return f.fail("tool_choice", "field 'tool_choice' asks for a tool call but the request has "
                                 "no 'tools'");
  if (!named) {
    tools.choice = ToolSettings::Choice::kRequired;
    return;
  }
  tools.namedFunction = (*choice)["function"]["name"].get<std::string>();
  if (std::find(names.begin(), names.end(), tools.namedFunction) == names.end())
    return f.fail("tool_choice.function.name",
                  "field 'tool_choice.function.name' is '" + tools.namedFunction +
                      "', which is not one of the request's tools (" + joined(names) + ")");
  tools.choice = ToolSettings::Choice::kNamed;
}

// Moves a parameters schema's $defs / definitions to `root` (the combined schema's refs resolve
// there). Two tools defining one name differently cannot share a root: an error naming it.
Status hoistDefinitions(OrderedJson &params, OrderedJson &root, const std::string &at) {
  for (const char *key : {"$defs", "definitions"}) {
    auto defs = params.find(key);
    if (defs == params.end())
      continue;
    if (!defs->is_object())
      return invalidArgument(at + "." + key + " must be an object");
    for (auto &[name, schema] : defs->items()) {
      OrderedJson &slot = root[key][name];
      if (!slot.is_null() && slot != schema)
        return invalidArgument(at + "." + key + "." + name +
                               " differs from another tool's definition of the same name");
      slot = schema;
    }
    params.erase(key);
  }
  return okStatus();
}

// "required": [{"name": one of the tools, "parameters": its schema}, ...], one or more calls.
Result<OrderedJson> requiredSchema(const OrderedJson &toolList, bool parallel) {
  OrderedJson root = {{"type", "array"}, {"minItems", 1}};
  if (!parallel)
    root["maxItems"] = 1;
  OrderedJson calls = OrderedJson::array();
  for (size_t i = 0; i < toolList.size(); ++i) {
    OrderedJson params = parametersOf(toolList[i]);
    KILN_RETURN_IF_ERROR(
        hoistDefinitions(params, root, "tools[" + std::to_string(i) + "].function.parameters"));
    OrderedJson properties = {{"name", {{"const", toolList[i]["function"]["name"]}}},
                              {"parameters", std::move(params)}};
    calls.push_back({{"type", "object"},
                     {"properties", std::move(properties)},
                     {"required", {"name", "parameters"}},
                     {"additionalProperties", false}});
  }
  root["items"] = {{"anyOf", std::move(calls)}};
  return root;
}

void compileForced(JsonFields &f, const OrderedJson &toolList, GenerationRequest &out) {
  const ToolSettings &tools = out.tools;
  std::string field = "tools";
  Result<OrderedJson> schema = OrderedJson();
  if (tools.choice == ToolSettings::Choice::kRequired) {
    schema = requiredSchema(toolList, tools.parallel);
  } else {
    for (size_t i = 0; i < toolList.size(); ++i)
      if (toolList[i]["function"]["name"] == tools.namedFunction) {
        schema = parametersOf(toolList[i]);
        field = "tools[" + std::to_string(i) + "].function.parameters";
      }
  }
  Result<std::string> text = schema.isOk() ? structured::jsonSchemaToGrammar(*schema)
                                           : Result<std::string>(schema.status());
  Result<std::shared_ptr<const structured::Grammar>> grammar =
      text.isOk() ? structured::sharedGrammarCache().get(*text)
                  : Result<std::shared_ptr<const structured::Grammar>>(text.status());
  if (!grammar.isOk())
    return f.fail(field, "field '" + field +
                             "' cannot constrain tool_choice: " + grammar.status().message());
  out.grammar = *grammar;
}

} // namespace

void readTools(JsonFields &f, const OrderedJson &ordered, GenerationRequest &out) {
  std::vector<std::string> names;
  auto tools = ordered.find("tools");
  if (tools != ordered.end() && !tools->is_null()) {
    names = checkTools(f, *tools);
    if (!f.ok())
      return;
    out.prompt.chatExtra["tools"] = *tools;
  }
  std::optional<bool> parallel;
  f.readBool("parallel_tool_calls", parallel);
  out.tools.parallel = parallel.value_or(true);
  readChoice(f, ordered, names, out.tools);
  if (!f.ok() || (out.tools.choice != ToolSettings::Choice::kRequired &&
                  out.tools.choice != ToolSettings::Choice::kNamed))
    return;
  if (const char *other = structuredOutputField(f); other && out.grammar)
    return f.fail("tool_choice", std::string("fields 'tool_choice' and '") + other +
                                     "' cannot be used together: a forced tool call constrains "
                                     "the output already");
  compileForced(f, *tools, out);
}

void toolArgumentsAsObjects(OrderedJson &messages) {
  if (!messages.is_array())
    return;
  for (OrderedJson &message : messages) {
    auto calls = message.is_object() ? message.find("tool_calls") : message.end();
    if (calls == message.end() || !calls->is_array())
      continue;
    for (OrderedJson &call : *calls) {
      auto function = call.is_object() ? call.find("function") : call.end();
      if (function == call.end() || !function->is_object())
        continue;
      auto args = function->find("arguments");
      if (args == function->end() || !args->is_string())
        continue;
      OrderedJson parsed = OrderedJson::parse(args->get<std::string>(), nullptr, false);
      if (parsed.is_object())
        *args = std::move(parsed);
    }
  }
}

std::string newToolCallId(ToolCallFormat format) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i)
    id += kAlphabet[pick(rng)];
  return id;
}

ToolCallFormat toolCallFormatFor(const ToolSettings &tools, ToolCallFormat modelFormat) {
  switch (tools.choice) {
  case ToolSettings::Choice::kAuto:
    return modelFormat;
  case ToolSettings::Choice::kRequired:
    return ToolCallFormat::kForcedArray;
  default:
    return ToolCallFormat::kNone;
  }
}

} // namespace kiln::rt::serve
