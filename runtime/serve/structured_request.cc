#include "runtime/serve/structured_request.h"

#include "runtime/structured/grammar_cache.h"
#include "runtime/structured/json_schema_grammar.h"
#include "runtime/structured/regex_grammar.h"

#include <vector>

namespace kiln::rt::serve {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Compiles grammar text (cached) into out.grammar; errors name `field`.
void compileInto(JsonFields &f, const std::string &field, const Result<std::string> &text,
                 GenerationRequest &out) {
  if (!text.isOk())
    return f.fail(field, "field '" + f.path(field) + "': " + text.status().message());
  Result<std::shared_ptr<const structured::Grammar>> grammar =
      structured::sharedGrammarCache().get(*text);
  if (!grammar.isOk())
    return f.fail(field, "field '" + f.path(field) + "': " + grammar.status().message());
  out.grammar = *grammar;
}

// A schema given as an object, or as its JSON text (vLLM accepts both).
Result<std::string> schemaGrammar(const OrderedJson &value) {
  if (value.is_string()) {
    OrderedJson parsed = OrderedJson::parse(value.get<std::string>(), nullptr, false);
    if (parsed.is_discarded())
      return invalidArgument("the schema text is not valid JSON");
    return structured::jsonSchemaToGrammar(parsed);
  }
  if (!value.is_object() && !value.is_boolean())
    return invalidArgument("a JSON schema must be an object");
  return structured::jsonSchemaToGrammar(value);
}

Result<std::string> stringField(const OrderedJson &value, const char *what,
                                Result<std::string> (*convert)(std::string_view)) {
  if (!value.is_string())
    return invalidArgument(std::string(what) + " must be a string");
  if (!convert)
    return value.get<std::string>();
  return convert(value.get<std::string>());
}

Result<std::string> choiceField(const OrderedJson &value) {
  if (!value.is_array() || value.empty())
    return invalidArgument("a choice must be a non-empty array of strings");
  std::vector<std::string> choices;
  for (const OrderedJson &c : value) {
    if (!c.is_string())
      return invalidArgument("a choice must be a non-empty array of strings");
    choices.push_back(c.get<std::string>());
  }
  return structured::choiceGrammar(choices);
}

// One vLLM-style constraint ("json", "regex", "choice" or "grammar") to grammar text.
Result<std::string> vllmConstraint(const std::string &kind, const OrderedJson &value) {
  if (kind == "json")
    return schemaGrammar(value);
  if (kind == "regex")
    return stringField(value, "a regex", &structured::regexToGrammar);
  if (kind == "choice")
    return choiceField(value);
  return stringField(value, "a grammar", nullptr);
}

Result<std::string> responseFormat(const OrderedJson &format, bool &none) {
  none = false;
  const auto type = format.is_object() ? format.find("type") : format.end();
  if (type == format.end() || !type->is_string())
    return invalidArgument("must be an object with a string 'type'");
  if (*type == "text") {
    none = true;
    return std::string();
  }
  if (*type == "json_object")
    return structured::jsonObjectGrammar();
  if (*type != "json_schema")
    return invalidArgument("'type' is '" + type->get<std::string>() +
                           "'; use \"text\", \"json_object\" or \"json_schema\"");
  const auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object() || !spec->contains("schema"))
    return invalidArgument("type \"json_schema\" needs 'json_schema': {\"name\": ..., "
                           "\"schema\": {...}}");
  return schemaGrammar((*spec)["schema"]);
}

} // namespace

const char *structuredOutputField(const JsonFields &f) {
  for (const char *name : {"response_format", "guided_json", "guided_regex", "guided_choice",
                           "guided_grammar", "structured_outputs"})
    if (f.has(name))
      return name;
  return nullptr;
}

bool hasStructuredOutput(const JsonFields &f) {
  return structuredOutputField(f) != nullptr;
}

void readStructuredOutput(JsonFields &f, const nlohmann::ordered_json *ordered,
                          GenerationRequest &out) {
  const OrderedJson body = ordered ? *ordered : OrderedJson::object();
  auto valueOf = [&](const char *name) -> OrderedJson {
    if (ordered && ordered->contains(name))
      return (*ordered)[name];
    const nlohmann::json *v = f.get(name);
    return v ? OrderedJson::parse(v->dump()) : OrderedJson();
  };
  struct Given {
    std::string field, kind;
  };
  std::vector<Given> given;
  for (const char *kind : {"json", "regex", "choice", "grammar"})
    if (f.has(("guided_" + std::string(kind)).c_str()))
      given.push_back({"guided_" + std::string(kind), kind});
  if (f.has("structured_outputs"))
    given.push_back({"structured_outputs", ""});
  if (f.has("response_format"))
    given.push_back({"response_format", ""});
  if (given.size() > 1)
    return f.fail(given[1].field, "fields '" + given[0].field + "' and '" + given[1].field +
                                      "' cannot be used together: give one constraint");
  if (given.empty())
    return;
  const Given &g = given.front();
  const OrderedJson value = valueOf(g.field.c_str());
  if (g.field == "response_format") {
    bool none = false;
    Result<std::string> text = responseFormat(value, none);
    if (!none)
      compileInto(f, g.field, text, out);
    return;
  }
  if (g.field == "structured_outputs") {
    if (!value.is_object() || value.size() != 1)
      return f.fail(g.field, "field 'structured_outputs' must hold one of 'json', 'regex', "
                             "'choice' or 'grammar'");
    const std::string kind = value.begin().key();
    if (kind != "json" && kind != "regex" && kind != "choice" && kind != "grammar")
      return f.fail(g.field, "field 'structured_outputs." + kind +
                                 "' is not supported; use "
                                 "'json', 'regex', 'choice' or 'grammar'");
    return compileInto(f, g.field, vllmConstraint(kind, value.begin().value()), out);
  }
  compileInto(f, g.field, vllmConstraint(g.kind, value), out);
}

void readTgiGrammar(JsonFields &p, const nlohmann::ordered_json *ordered, GenerationRequest &out) {
  const nlohmann::json *grammar = p.get("grammar");
  if (!grammar)
    return;
  const auto type = grammar->is_object() ? grammar->find("type") : grammar->end();
  if (type == grammar->end() || !grammar->contains("value") ||
      (*type != "json" && *type != "regex"))
    return p.fail("grammar", "field '" + p.path("grammar") +
                                 "' must be {\"type\": \"json\" | \"regex\", \"value\": ...}");
  const OrderedJson value = ordered && ordered->contains("grammar") &&
                                    (*ordered)["grammar"].is_object() &&
                                    (*ordered)["grammar"].contains("value")
                                ? (*ordered)["grammar"]["value"]
                                : OrderedJson::parse((*grammar)["value"].dump());
  compileInto(p, "grammar", vllmConstraint(type->get<std::string>(), value), out);
}

} // namespace kiln::rt::serve
