// JSON Schema -> grammar text: the schema walk and the rules it generates. The library rules they
// refer to, and the helpers that spell grammar text, are in
// runtime/structured/json_schema_library.cc.
#include "runtime/structured/json_schema_grammar.h"

#include "runtime/structured/json_schema_library.h"
#include "runtime/structured/json_schema_numbers.h"
#include "runtime/structured/utf8_ranges.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::structured {
namespace {

using json_schema_internal::classMember;
using json_schema_internal::hasTopLevelAlternation;
using json_schema_internal::integerBody;
using json_schema_internal::invalid;
using json_schema_internal::isAtom;
using json_schema_internal::isLibraryRule;
using json_schema_internal::isNameChar;
using json_schema_internal::join;
using json_schema_internal::jsonSafePatternRules;
using json_schema_internal::kFormats;
using json_schema_internal::kUnbounded;
using json_schema_internal::libraryRulesReachedFrom;
using json_schema_internal::literal;
using json_schema_internal::numberBody;
using json_schema_internal::PatternRules;
using json_schema_internal::pointerToken;
using json_schema_internal::quantified;
using json_schema_internal::renameReferences;
using json_schema_internal::RuleText;
using json_schema_internal::schemaError;
using json_schema_internal::unescapePointerToken;
using json_schema_internal::unsupported;

// ordered_json keeps the schema's key order, which becomes the order of an object's members.
using Json = nlohmann::ordered_json;

// grammar.h bounds every quantifier by 1000; minItems, maxItems, minLength, maxLength likewise.
constexpr uint64_t kMaxRepeat = 1000;
// Schemas come in requests: bounding their nesting keeps a hostile one off the stack's end. (A
// definition is built once, wherever it is referred to, so the JSON pointer measures the depth.)
constexpr long kMaxPointerDepth = 128;
// A schema's patterns together compile to at most this many grammar elements: a quarter of the
// limit of runtime/structured/grammar.cc, which charges a repetition up to twice the elements it
// leaves, so the patterns take at most half and the rest of the schema has the other half.
constexpr size_t kMaxPatternElements = size_t(1) << 18;
// Extra object keys avoid the listed property names with one group level per character; a bound
// keeps that nesting (and the grammar parser's recursion) small.
constexpr size_t kMaxExcludedNameLength = 256;

// Keywords that change nothing about which documents validate.
constexpr std::string_view kAnnotations =
    "title description default examples $schema $id "
    "$comment $defs definitions deprecated readOnly writeOnly";
// Keywords that decide the schema on their own; beside them only annotations (and `type`, which
// filters enum and const values) are accepted.
constexpr std::string_view kCombinators[] = {"$ref", "anyOf", "oneOf", "allOf", "enum", "const"};
// Keywords of one type: they apply only when the value has that type, and without `type` they
// say which types the schema means.
constexpr std::pair<std::string_view, std::array<std::string_view, 5>> kTypeKeywords[] = {
    {"object", {"properties", "required", "additionalProperties"}},
    {"array", {"items", "prefixItems", "minItems", "maxItems"}},
    {"string", {"minLength", "maxLength", "format", "pattern"}},
    {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}},
};
// JSON Schema (2020-12 and earlier drafts) keywords this converter does not implement yet; any
// other keyword is not JSON Schema at all.
constexpr std::string_view kNotYetSupported =
    "patternProperties propertyNames minProperties maxProperties dependentRequired "
    "dependentSchemas dependencies unevaluatedItems unevaluatedProperties additionalItems "
    "contains minContains maxContains uniqueItems not if then else contentEncoding "
    "contentMediaType contentSchema $anchor $dynamicRef $dynamicAnchor $recursiveRef "
    "$recursiveAnchor $vocabulary";
constexpr std::string_view kTypes = "string number integer boolean null object array";

// True when `word` is one of the space-separated words of `list`.
bool hasWord(std::string_view list, std::string_view word) {
  return !word.empty() && word.find(' ') == std::string_view::npos &&
         (" " + std::string(list) + " ").find(" " + std::string(word) + " ") != std::string::npos;
}

template <typename Range> bool contains(const Range &range, std::string_view item) {
  return std::find(std::begin(range), std::end(range), item) != std::end(range);
}

bool isTypeKeyword(std::string_view keyword) {
  for (const auto &[type, keywords] : kTypeKeywords)
    if (!keyword.empty() && contains(keywords, keyword))
      return true;
  return false;
}

// The characters of `text`, each as its UTF-8 bytes, or nothing when it is not valid UTF-8
// (utf8_ranges.h decodes).
std::optional<std::vector<std::string>> splitCharacters(std::string_view text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t length = decodeUtf8(text.substr(i), cp);
    if (length == 0)
      return std::nullopt;
    out.emplace_back(text.substr(i, length));
    i += length;
  }
  return out;
}

// JSON Schema's types are nlohmann's type names, plus "integer": a number without a fraction.
bool matchesType(const Json &value, std::string_view type) {
  if (type == "integer")
    return value.is_number_integer() ||
           (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>());
  return value.type_name() == type;
}

Status checkKeywords(const Json &schema, const std::string &path) {
  for (const auto &entry : schema.items()) {
    const std::string &keyword = entry.key();
    if (hasWord(kAnnotations, keyword) || contains(kCombinators, keyword) || keyword == "type" ||
        isTypeKeyword(keyword))
      continue;
    if (hasWord(kNotYetSupported, keyword))
      return unsupported(path, "keyword '" + keyword + "'");
    return schemaError(StatusCode::kUnimplemented, path,
                       "keyword '" + keyword + "' is not supported");
  }
  return okStatus();
}

// The one combinator keyword of `schema`, or "" when it has none.
Result<std::string_view> findCombinator(const Json &schema, const std::string &path) {
  std::string_view found;
  for (std::string_view keyword : kCombinators) {
    if (!schema.contains(std::string(keyword)))
      continue;
    if (!found.empty())
      return unsupported(path, "keyword '" + std::string(keyword) + "' beside '" +
                                   std::string(found) + "'");
    found = keyword;
  }
  if (found.empty())
    return found;
  for (const auto &entry : schema.items()) {
    const std::string &keyword = entry.key();
    const bool filtersValues = keyword == "type" && (found == "enum" || found == "const");
    if (keyword != found && !hasWord(kAnnotations, keyword) && !filtersValues)
      return unsupported(path, "keyword '" + keyword + "' beside '" + std::string(found) + "'");
  }
  return found;
}

Result<std::vector<std::string>> declaredTypes(const Json &type, const std::string &path) {
  const Json types = type.is_array() ? type : Json::array({type});
  if (types.empty())
    return invalid(path, "'type' is an empty list: the schema matches nothing");
  std::vector<std::string> out;
  for (const Json &name : types) {
    if (!name.is_string() || !hasWord(kTypes, name.get<std::string>()))
      return invalid(path, "'type' " + name.dump() + " is not a JSON Schema type");
    if (!contains(out, name.get<std::string>()))
      out.push_back(name.get<std::string>());
  }
  return out;
}

// The declared types, or without `type` the types whose keywords the schema uses (none: any).
Result<std::vector<std::string>> typesOf(const Json &schema, const std::string &path) {
  if (schema.contains("type"))
    return declaredTypes(schema.at("type"), path);
  std::vector<std::string> inferred;
  for (const auto &[type, keywords] : kTypeKeywords)
    for (std::string_view keyword : keywords)
      if (!keyword.empty() && schema.contains(std::string(keyword)) && !contains(inferred, type))
        inferred.emplace_back(type);
  return inferred;
}

// A non-negative integer keyword (minItems, maxLength, ...), at most kMaxRepeat.
Result<std::optional<uint64_t>> readCount(const Json &schema, const std::string &keyword,
                                          const std::string &path) {
  if (!schema.contains(keyword))
    return std::optional<uint64_t>();
  const Json &value = schema.at(keyword);
  const double count = value.is_number() ? value.get<double>() : -1;
  if (count < 0 || std::floor(count) != count)
    return invalid(path, "'" + keyword + "' must be a non-negative integer");
  if (count > kMaxRepeat)
    return schemaError(StatusCode::kOutOfRange, path,
                       "'" + keyword + "' is " + value.dump() + ", over the limit of " +
                           std::to_string(kMaxRepeat));
  return std::optional<uint64_t>(static_cast<uint64_t>(count));
}

Result<std::string> enumBody(const Json &schema, const std::string &keyword,
                             const std::string &path) {
  const Json &listed = schema.at(keyword);
  if (keyword == "enum" && !listed.is_array())
    return invalid(path, "'enum' must be an array");
  const Json values = keyword == "enum" ? listed : Json::array({listed});
  std::vector<std::string> types;
  if (schema.contains("type")) {
    KILN_ASSIGN_OR_RETURN(types, declaredTypes(schema.at("type"), path));
  }
  std::vector<std::string> alternatives;
  for (const Json &value : values) {
    const bool typeFits =
        types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string &type) {
          return matchesType(value, type);
        });
    const std::string text = literal(value.dump());
    if (typeFits && !contains(alternatives, text))
      alternatives.push_back(text);
  }
  if (alternatives.empty())
    return invalid(path,
                   "'" + keyword + "' lists no value of the schema's type: it matches nothing");
  return join(alternatives, " | ");
}

Result<std::string> formatBody(const Json &format, const std::string &path) {
  if (!format.is_string())
    return invalid(path, "'format' must be a string");
  if (hasWord(kFormats, format.get<std::string>()))
    return format.get<std::string>() + "-string";
  return unsupported(path, "format '" + format.get<std::string>() + "'",
                     "supported: " + std::string(kFormats));
}

Result<std::string> stringBody(const Json &schema, const std::string &path) {
  KILN_ASSIGN_OR_RETURN(std::optional<uint64_t> minLength, readCount(schema, "minLength", path));
  KILN_ASSIGN_OR_RETURN(std::optional<uint64_t> maxLength, readCount(schema, "maxLength", path));
  if (schema.contains("format")) {
    if (minLength || maxLength)
      return unsupported(path, std::string("keyword '") + (minLength ? "minLength" : "maxLength") +
                                   "' beside 'format'");
    return formatBody(schema.at("format"), path);
  }
  const uint64_t least = minLength.value_or(0), most = maxLength.value_or(kUnbounded);
  if (least > most)
    return invalid(path, "'minLength' exceeds 'maxLength': the schema matches nothing");
  if (least == 0 && most == kUnbounded)
    return std::string("string");
  if (most == 0)
    return literal("\"\"");
  // A `char` is one character of the decoded string: a code point or one escape sequence.
  return R"("\"" )" + quantified("char", least, most) + R"( "\"")";
}

struct Member {
  std::string text;
  bool required = false;
};

// The members between the braces: listed ones in order, optional ones each possibly absent, then
// any number of `extra` members ("" when none is allowed). Commas go only between members that
// are present: before the first required member an optional one carries its comma after it,
// past it before it.
std::string memberSequence(const std::vector<Member> &members, const std::string &extra) {
  const std::string extras = extra.empty() ? "" : R"(( "," ws )" + extra + " )*";
  const auto firstRequired =
      std::find_if(members.begin(), members.end(), [](const Member &m) { return m.required; });
  if (firstRequired == members.end()) {
    // Nothing required: any non-empty subsequence, grown one member at a time so the text stays
    // linear in the member count, or nothing at all.
    std::string present;
    for (const Member &member : members) {
      const bool first = present.empty(), single = &member == &members[1];
      const std::string earlier = single ? present : "( " + present + " )";
      present =
          first ? member.text : earlier + R"( ( "," ws )" + member.text + " )? | " + member.text;
    }
    if (extra.empty())
      return present.empty() ? "" : "( " + present + " )?";
    if (present.empty())
      return "( " + extra + " " + extras + " )?";
    return "( ( " + present + " | " + extra + " ) " + extras + " )?";
  }
  std::vector<std::string> parts;
  for (auto it = members.begin(); it != firstRequired; ++it)
    parts.push_back("( " + it->text + R"( "," ws )?)");
  parts.push_back(firstRequired->text);
  for (auto it = firstRequired + 1; it != members.end(); ++it)
    parts.push_back(it->required ? R"("," ws )" + it->text : R"(( "," ws )" + it->text + " )?");
  parts.push_back(extras);
  return join(parts, " ");
}

// Elements from index `i` of an array whose element i-1 is present: prefix items one at a time
// (each optional once `least` are present; nested, so none is present without those before it),
// then `item` repeated up to `limit` elements in all.
std::string arrayTail(const std::vector<std::string> &prefix, const std::string &item, uint64_t i,
                      uint64_t least, uint64_t limit) {
  if (i >= limit)
    return "";
  if (i >= prefix.size()) {
    const uint64_t lo = least > i ? least - i : 0;
    const uint64_t hi = limit == kUnbounded ? kUnbounded : limit - i;
    return quantified(R"(( "," ws )" + item + " )", lo, hi);
  }
  const std::string next = arrayTail(prefix, item, i + 1, least, limit);
  const std::string present = R"("," ws )" + prefix[i] + (next.empty() ? "" : " " + next);
  return i < least ? present : "( " + present + " )?";
}

using Characters = std::vector<std::string>;

// The rest of a key (after its opening quote) that spells none of `names`, all of which share
// the key's first `depth` characters: leave them with a character none continues with, end
// where none ends, or continue with one name's character.
std::string keyOutside(const std::vector<Characters> &names, size_t depth) {
  std::map<std::string, std::vector<Characters>> byNext;
  bool aNameEnds = false;
  for (const Characters &name : names) {
    if (name.size() == depth)
      aNameEnds = true;
    else
      byNext[name[depth]].push_back(name);
  }
  std::vector<std::string> alternatives;
  if (byNext.empty()) {
    alternatives.push_back(R"(plain-char+ "\"")");
  } else {
    std::string others = R"([^\"\\\x00-\x1F)";
    for (const auto &[character, continuing] : byNext)
      others += classMember(character);
    alternatives.push_back(others + R"(] plain-char* "\"")");
    for (const auto &[character, continuing] : byNext)
      alternatives.push_back(literal(character) + " ( " + keyOutside(continuing, depth + 1) + " )");
  }
  if (!aNameEnds)
    alternatives.push_back(R"("\"")");
  return join(alternatives, " | ");
}

class SchemaConverter {
public:
  explicit SchemaConverter(const Json &root) : root_(root) {}

  Result<std::string> convert() {
    definitions_.push_back({&root_, "#", reserveRule("root")});
    // Definitions are built here, one after another, not inside the schema that refers to them:
    // a long chain of definitions then costs no stack, and the JSON pointer measures nesting.
    for (size_t i = 0; i < definitions_.size(); ++i) {
      const Definition next = definitions_[i];
      KILN_ASSIGN_OR_RETURN(std::string body, bodyFor(*next.schema, next.path, next.rule));
      defineRule(next.rule, std::move(body));
    }
    return render();
  }

private:
  struct Rule {
    std::string name, body;
  };
  struct Definition {
    const Json *schema;
    std::string path, rule;
  };

  Result<std::string> bodyFor(const Json &schema, const std::string &path,
                              const std::string &hint) {
    if (schema == Json(true))
      return std::string("value");
    if (schema == Json(false))
      return invalid(path, "schema 'false' matches nothing");
    if (!schema.is_object())
      return invalid(path, "a schema must be an object or a boolean");
    if (std::count(path.begin(), path.end(), '/') > kMaxPointerDepth)
      return schemaError(StatusCode::kOutOfRange, path,
                         "schemas nest deeper than " + std::to_string(kMaxPointerDepth) +
                             " JSON pointer steps");
    KILN_RETURN_IF_ERROR(checkKeywords(schema, path));
    KILN_ASSIGN_OR_RETURN(std::string_view combinator, findCombinator(schema, path));
    if (!combinator.empty())
      return combinatorBody(schema, std::string(combinator), path, hint);
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> types, typesOf(schema, path));
    if (types.empty())
      return std::string("value");
    std::vector<std::string> alternatives;
    for (const std::string &type : types) {
      KILN_ASSIGN_OR_RETURN(std::string alternative, typeBody(schema, type, path, hint));
      alternatives.push_back(std::move(alternative));
    }
    return join(alternatives, " | ");
  }

  // A rule name or literal for `schema`: its body, given a rule of its own unless it is atomic.
  Result<std::string> refFor(const Json &schema, const std::string &path, const std::string &hint) {
    const std::string name = reserveRule(hint); // first, so a parent prints before its children
    KILN_ASSIGN_OR_RETURN(std::string body, bodyFor(schema, path, name));
    if (isAtom(body)) {
      dropRule(name);
      return body;
    }
    defineRule(name, std::move(body));
    return name;
  }

  Result<std::string> combinatorBody(const Json &schema, const std::string &keyword,
                                     const std::string &path, const std::string &hint) {
    const Json &value = schema.at(keyword);
    if (keyword == "$ref")
      return refBody(value, path);
    if (keyword == "enum" || keyword == "const")
      return enumBody(schema, keyword, path);
    const std::string at = path + "/" + keyword;
    if (!value.is_array() || value.empty())
      return invalid(path, "'" + keyword + "' must be a non-empty array of schemas");
    if (keyword == "allOf" && value.size() != 1)
      return unsupported(path, "'allOf' with more than one schema");
    // oneOf is taken as anyOf: a document that validates against several alternatives is
    // accepted, which only matters for overlapping alternatives.
    return anyOfBody(value, at, hint);
  }

  Result<std::string> anyOfBody(const Json &alternatives, const std::string &path,
                                const std::string &hint) {
    if (alternatives.size() == 1)
      return bodyFor(alternatives[0], path + "/0", hint);
    std::vector<std::string> bodies;
    for (size_t i = 0; i < alternatives.size(); ++i) {
      const std::string index = std::to_string(i);
      KILN_ASSIGN_OR_RETURN(std::string body,
                            refFor(alternatives[i], path + "/" + index, hint + "-" + index));
      bodies.push_back(std::move(body));
    }
    return join(bodies, " | ");
  }

  Result<std::string> refBody(const Json &ref, const std::string &path) {
    if (!ref.is_string())
      return invalid(path, "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    if (target == "#")
      return std::string("root");
    if (auto known = refRules_.find(target); known != refRules_.end())
      return known->second;
    for (const std::string container : {"$defs", "definitions"}) {
      const std::string prefix = "#/" + container + "/";
      if (target.rfind(prefix, 0) != 0 || target.find('/', prefix.size()) != std::string::npos)
        continue;
      const std::string name = unescapePointerToken(target.substr(prefix.size()));
      const auto definitions = root_.find(container);
      if (definitions == root_.end() || !definitions->is_object() || !definitions->contains(name))
        return invalid(path, "$ref '" + target + "' names no definition");
      // Every reference, the definition's own included, names its rule: recursion is by rule.
      const std::string rule = reserveRule("def-" + name);
      refRules_[target] = rule;
      definitions_.push_back(
          {&definitions->at(name), "#/" + container + "/" + pointerToken(name), rule});
      return rule;
    }
    return unsupported(path, "$ref '" + target + "'",
                       "only '#', '#/$defs/NAME' and '#/definitions/NAME'");
  }

  Result<std::string> typeBody(const Json &schema, const std::string &type, const std::string &path,
                               const std::string &hint) {
    if (type == "string" && schema.contains("pattern"))
      return patternBody(schema, path, hint);
    if (type == "string")
      return stringBody(schema, path);
    if (type == "integer")
      return integerBody(schema, path);
    if (type == "number")
      return numberBody(schema, path);
    if (type == "object")
      return objectBody(schema, path, hint);
    if (type == "array")
      return arrayBody(schema, path, hint);
    return std::string(type); // boolean, null: library rules of the same name
  }

  // A string whose value the regex `pattern` matches whole. A deviation: JSON Schema's `pattern`
  // is a search (unanchored: "a" matches "cat"), but a grammar that allowed anything around the
  // match would let the model write anything; so it is a full match, as for guided_regex
  // (runtime/structured/regex_grammar.h). The regex's rules are renamed after `hint` (no clash
  // with other rules) and root's body is inlined.
  Result<std::string> patternBody(const Json &schema, const std::string &path,
                                  const std::string &hint) {
    const Json &pattern = schema.at("pattern");
    if (!pattern.is_string())
      return invalid(path, "'pattern' must be a string");
    for (const std::string other : {"minLength", "maxLength", "format"})
      if (schema.contains(other))
        return unsupported(path, "keyword '" + other + "' beside 'pattern'");
    Result<PatternRules> compiled = jsonSafePatternRules(pattern.get<std::string>());
    if (!compiled.isOk())
      return schemaError(compiled.status().code(), path,
                         "'pattern' " + pattern.dump() + ": " + compiled.status().message());
    patternElements_ += compiled->elements;
    if (patternElements_ > kMaxPatternElements)
      return schemaError(StatusCode::kOutOfRange, path,
                         "'pattern' " + pattern.dump() + ": the schema's patterns compile to " +
                             "more than " + std::to_string(kMaxPatternElements) + " elements");
    // root's body goes between the quotes, or when it has alternatives its rule (a group there
    // could nest one level deeper than grammar.h allows).
    const std::vector<RuleText> &rules = compiled->rules;
    const bool inlineRoot = !hasTopLevelAlternation(rules.front().body);
    std::map<std::string, std::string> names;
    for (const RuleText &rule : rules)
      if (rule.name != "root" || !inlineRoot)
        names[rule.name] = reserveRule(hint + "-" + (rule.name == "root" ? "pattern" : rule.name));
    for (const RuleText &rule : rules)
      if (names.count(rule.name))
        defineRule(names.at(rule.name), renameReferences(rule.body, names));
    const std::string root =
        inlineRoot ? renameReferences(rules.front().body, names) : names["root"];
    return R"("\"" )" + root + R"( "\"")";
  }

  Result<std::string> objectBody(const Json &schema, const std::string &path,
                                 const std::string &hint) {
    const Json properties =
        schema.contains("properties") ? schema.at("properties") : Json::object();
    if (!properties.is_object())
      return invalid(path, "'properties' must be an object");
    const Json required = schema.contains("required") ? schema.at("required") : Json::array();
    for (const Json &name : required.is_array() ? required : Json::array({nullptr})) {
      if (!name.is_string())
        return invalid(path, "'required' must be an array of strings");
      if (!properties.contains(name.get<std::string>()))
        return unsupported(path, "required property '" + name.get<std::string>() +
                                     "' missing from 'properties'");
    }
    const Json additional =
        schema.contains("additionalProperties") ? schema.at("additionalProperties") : Json(true);
    const bool anyAdditional = additional == Json(true) || additional == Json::object();
    if (properties.empty() && anyAdditional)
      return std::string("object");
    std::vector<Member> members;
    for (const auto &entry : properties.items()) {
      const std::string &name = entry.key();
      KILN_ASSIGN_OR_RETURN(
          std::string value,
          refFor(entry.value(), path + "/properties/" + pointerToken(name), hint + "-" + name));
      const bool isRequired = std::find(required.begin(), required.end(), name) != required.end();
      members.push_back({literal(Json(name).dump() + ":") + " ws " + value, isRequired});
    }
    std::string extra;
    if (additional != Json(false)) {
      KILN_ASSIGN_OR_RETURN(extra, extraMemberRule(additional, properties, path, hint));
    }
    const std::string content = memberSequence(members, extra);
    return content.empty() ? literal("{}") : R"("{" )" + content + R"( "}")";
  }

  // A member allowed by additionalProperties: a key that is not a listed property (its value would
  // have to match that property's schema instead), then a value of the additional schema.
  Result<std::string> extraMemberRule(const Json &additional, const Json &properties,
                                      const std::string &path, const std::string &hint) {
    const std::string rule = reserveRule(hint + "-additional");
    KILN_ASSIGN_OR_RETURN(std::string value,
                          refFor(additional, path + "/additionalProperties", rule + "-value"));
    std::string key = "string";
    if (!properties.empty()) {
      KILN_ASSIGN_OR_RETURN(key, excludedKeyRule(properties, path, rule + "-key"));
    }
    defineRule(rule, key + R"( ":" ws )" + value);
    return rule;
  }

  // Keys other than the property names. Such keys are written without escapes: an escape could
  // spell a listed name in another way (\u0061 for "a"), and excluding every spelling is not
  // worth it, so the grammar is stricter here than the schema.
  Result<std::string> excludedKeyRule(const Json &properties, const std::string &path,
                                      const std::string &hint) {
    std::vector<Characters> names;
    for (const auto &entry : properties.items()) {
      const std::optional<std::vector<std::string>> characters = splitCharacters(entry.key());
      if (!characters)
        return invalid(path, "property name is not valid UTF-8");
      if (characters->size() > kMaxExcludedNameLength)
        return unsupported(path, "a property name longer than " +
                                     std::to_string(kMaxExcludedNameLength) +
                                     " characters beside 'additionalProperties'");
      // Only names written without escapes ('"', '\', control characters) can be such keys.
      const auto needsEscape = [](const std::string &c) {
        return c.size() == 1 &&
               (c[0] == '"' || c[0] == '\\' || static_cast<unsigned char>(c[0]) < 0x20);
      };
      if (std::none_of(characters->begin(), characters->end(), needsEscape))
        names.push_back(*characters);
    }
    const std::string rule = reserveRule(hint);
    defineRule(rule, R"("\"" ( )" + keyOutside(names, 0) + " )");
    return rule;
  }

  Result<std::string> arrayBody(const Json &schema, const std::string &path,
                                const std::string &hint) {
    const Json items = schema.contains("items") ? schema.at("items") : Json(true);
    if (items.is_array())
      return unsupported(path, "'items' as an array", "use 'prefixItems'");
    const Json prefixItems =
        schema.contains("prefixItems") ? schema.at("prefixItems") : Json::array();
    if (!prefixItems.is_array())
      return invalid(path, "'prefixItems' must be an array of schemas");
    KILN_ASSIGN_OR_RETURN(std::optional<uint64_t> minItems, readCount(schema, "minItems", path));
    KILN_ASSIGN_OR_RETURN(std::optional<uint64_t> maxItems, readCount(schema, "maxItems", path));
    if (prefixItems.empty() && !minItems && !maxItems &&
        (items == Json(true) || items == Json::object()))
      return std::string("array");
    std::vector<std::string> prefix;
    for (size_t i = 0; i < prefixItems.size(); ++i) {
      const std::string index = std::to_string(i);
      KILN_ASSIGN_OR_RETURN(
          std::string element,
          refFor(prefixItems[i], path + "/prefixItems/" + index, hint + "-item-" + index));
      prefix.push_back(std::move(element));
    }
    std::string item;
    uint64_t limit = maxItems.value_or(kUnbounded);
    if (items == Json(false)) {
      limit = std::min<uint64_t>(limit, prefix.size());
    } else {
      KILN_ASSIGN_OR_RETURN(item, refFor(items, path + "/items", hint + "-item"));
    }
    const uint64_t least = minItems.value_or(0);
    if (least > limit)
      return invalid(path, "'minItems' is more than the schema allows: it matches nothing");
    if (limit == 0)
      return literal("[]");
    const std::string rest = arrayTail(prefix, item, 1, least, limit);
    const std::string elements =
        (prefix.empty() ? item : prefix[0]) + (rest.empty() ? "" : " " + rest);
    return R"("[" )" + (least > 0 ? elements : "( " + elements + " )?") + R"( "]")";
  }

  std::string reserveRule(const std::string &hint) {
    std::string base;
    for (char c : hint)
      base += isNameChar(c) ? c : '-';
    std::string name = base.empty() ? "rule" : base;
    for (int suffix = 2; isLibraryRule(name) || ruleIndex_.count(name); ++suffix)
      name = base + "-" + std::to_string(suffix);
    ruleIndex_[name] = rules_.size();
    rules_.push_back({name, ""});
    return name;
  }

  void defineRule(const std::string &name, std::string body) {
    rules_[ruleIndex_.at(name)].body = std::move(body);
  }

  // Frees the name; the slot stays (unprinted) so that later indices hold.
  void dropRule(const std::string &name) {
    rules_[ruleIndex_.at(name)].name.clear();
    ruleIndex_.erase(name);
  }

  // The generated rules, then the library rules they reach.
  std::string render() const {
    std::vector<std::string_view> bodies;
    std::string out;
    for (const Rule &rule : rules_) {
      bodies.push_back(rule.body); // a dropped rule's body is empty
      if (!rule.name.empty())
        out += rule.name + " ::= " + rule.body + "\n";
    }
    return out + libraryRulesReachedFrom(bodies);
  }

  const Json &root_;
  std::vector<Rule> rules_; // in the order printed; root first
  std::map<std::string, size_t> ruleIndex_;
  std::map<std::string, std::string> refRules_; // "$ref" target -> its rule
  size_t patternElements_ = 0;                  // of the patterns so far (kMaxPatternElements)
  std::vector<Definition> definitions_;         // root first, then each referred to
};

} // namespace

Result<std::string> jsonSchemaToGrammar(const nlohmann::ordered_json &schema) {
  try {
    SchemaConverter converter(schema);
    return converter.convert();
  } catch (const nlohmann::json::exception &error) {
    // e.g. a string that is not UTF-8 (dump) in a JSON value built in code, not parsed.
    return invalidArgument(std::string("json schema: ") + error.what());
  }
}

Result<std::string> jsonSchemaToGrammar(const nlohmann::json &schema) {
  return jsonSchemaToGrammar(nlohmann::ordered_json(schema));
}

std::string jsonObjectGrammar() {
  Result<std::string> grammar = jsonSchemaToGrammar(nlohmann::ordered_json{{"type", "object"}});
  assert(grammar.isOk());
  return grammar.isOk() ? *grammar : std::string();
}

} // namespace kiln::structured
