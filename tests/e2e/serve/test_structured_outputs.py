"""Structured outputs through `kiln serve` (runtime/structured, runtime/serve/structured_request.h)
on the random-weight tiny-llama: unconstrained, its samples are never JSON; constrained, every
sample of 20 JSON schemas (nested objects, arrays, enums, anyOf, $ref, pattern, integer and
number bounds) validates with the reference validator (the `jsonschema` package), every regex
sample matches Python's re.fullmatch, every choice sample is one of the choices; through OpenAI's
response_format, vLLM's guided_* and structured_outputs fields (guided_grammar: kiln's grammar
text), TGI's parameters.grammar, with n > 1, streaming and stop strings; the openai client's
`parse` helper with Pydantic models, unmodified. Schemas and patterns kiln cannot compile fail
with 400 naming the keyword."""
import json
import re
import typing
import unittest

import jsonschema
import openai
import pydantic

import serve_harness as h

PROMPT = [{"role": "user", "content": "Answer in JSON."}]
NAME = {"type": "string", "maxLength": 6}
INT = {"type": "integer"}
SCHEMAS = [
    {"type": "object", "properties": {"name": NAME}, "required": ["name"],
     "additionalProperties": False},
    {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": "null"}},
     "required": ["ok"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
     "required": ["color"], "additionalProperties": False},
    {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"},
                                      "p": {"type": "number", "exclusiveMinimum": 0,
                                            "maximum": 0.75},
                                      "t": {"type": "number", "minimum": -40.5,
                                            "exclusiveMaximum": 60.25}},
     "required": ["x", "y", "p", "t"], "additionalProperties": False},
    {"type": "array", "items": INT, "minItems": 1, "maxItems": 4},
    {"type": "array", "items": NAME, "maxItems": 3},
    {"type": "object", "properties": {"tags": {"type": "array", "items": NAME, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object",
     "properties": {"user": {"type": "object", "properties": {"id": INT, "name": NAME},
                             "required": ["id", "name"], "additionalProperties": False}},
     "required": ["user"], "additionalProperties": False},
    {"anyOf": [{"type": "integer"}, NAME]},
    {"type": "object", "properties": {"value": {"anyOf": [INT, {"type": "boolean"}, NAME]}},
     "required": ["value"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"const": "point"}, "x": INT},
     "required": ["kind", "x"], "additionalProperties": False},
    {"$defs": {"pt": {"type": "object", "properties": {"x": INT, "y": INT}, "required": ["x", "y"],
                      "additionalProperties": False}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
     "required": ["a", "b"], "additionalProperties": False},
    {"$defs": {"node": {"type": "object",
                        "properties": {"v": INT, "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                                   {"type": "null"}]}},
                        "required": ["v", "next"], "additionalProperties": False}},
     "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"name": NAME, "nick": NAME, "age": INT},
     "required": ["name"], "additionalProperties": False},
    {"type": "object", "properties": {"a": NAME, "b": INT, "c": {"type": "string",
                                                                 "pattern": "^x.{0,4}[^y]$"}},
     "additionalProperties": False},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
                                      "score": {"type": "integer", "minimum": -5,
                                                "exclusiveMaximum": 120}},
     "required": ["code", "score"], "additionalProperties": False},
    {"type": "string", "format": "date"},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
                                      "at": {"type": "string", "format": "date-time"}},
     "required": ["id", "at"], "additionalProperties": False},
    {"type": "object",
     "properties": {"matrix": {"type": "array", "maxItems": 2,
                               "items": {"type": "array", "items": INT, "maxItems": 2}}},
     "required": ["matrix"], "additionalProperties": False},
]
REGEXES = [r"\d{3}-\d{4}", r"(cat|dog)s?", r"[A-Z][a-z]{1,6}( [A-Z][a-z]{1,6})?",
           r"[+-]?\d{1,5}(\.\d{1,3})?", r"[a-z]{2,5}@[a-z]{2,5}\.(com|org)"]
CHOICES = ["red", "green", "blue", "dark red", "\u00e9t\u00e9"]


class StructuredOutputsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.artifact = h.tiny_artifact()
        cls.server = h.Server(cls.artifact, "--chat-template", h.CHAT_TEMPLATE).__enter__()
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused",
                                   max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        cls.server.__exit__(None, None, None)
        assert code == 0, f"kiln serve exited {code}"

    def chat(self, n, seed, **kwargs):
        return self.client.chat.completions.create(
            model="tiny-llama", messages=PROMPT, n=n, seed=seed, temperature=1.0, max_tokens=160,
            **kwargs)

    def test_openai_parse_helper_with_pydantic_models(self):
        # The client turns the models into a strict json_schema (nested model as $defs / $ref,
        # the Literal as an enum, every field required, no additional properties) and parses
        # each choice back into the model; a truncated or invalid sample would raise.
        class Address(pydantic.BaseModel):
            city: str = pydantic.Field(max_length=12)
            zip: str = pydantic.Field(pattern=r"^[0-9]{5}$")

        class Person(pydantic.BaseModel):
            name: str = pydantic.Field(max_length=10)
            age: int = pydantic.Field(ge=0, le=130)
            role: typing.Literal["admin", "user"]
            tags: typing.List[typing.Annotated[str, pydantic.Field(max_length=6)]] = \
                pydantic.Field(max_length=3)
            home: Address

        r = self.client.chat.completions.parse(
            model="tiny-llama", messages=PROMPT, n=6, seed=31, temperature=1.0, max_tokens=200,
            response_format=Person)
        self.assertEqual(len(r.choices), 6)
        for c in r.choices:
            with self.subTest(sample=c.index):
                self.assertEqual(c.finish_reason, "stop", c.message.content)
                self.assertIsInstance(c.message.parsed, Person)
                self.assertEqual(c.message.parsed, Person.model_validate_json(c.message.content))

    def test_unconstrained_samples_are_not_json(self):
        r = self.chat(10, 1)
        parsed = 0
        for c in r.choices:
            try:
                json.loads(c.message.content)
                parsed += 1
            except ValueError:
                pass
        self.assertLessEqual(parsed, 1, [c.message.content for c in r.choices])

    def test_every_schema_sample_validates(self):
        checked = 0
        for i, schema in enumerate(SCHEMAS):
            fmt = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema,
                                                          "strict": True}}
            r = self.chat(10, 100 + i, response_format=fmt)
            for c in r.choices:
                with self.subTest(schema=i, sample=c.index):
                    self.assertEqual(c.finish_reason, "stop", c.message.content)
                    value = json.loads(c.message.content)
                    jsonschema.validate(value, schema,
                                        format_checker=jsonschema.FormatChecker())
                    checked += 1
        self.assertEqual(checked, 200)

    def test_stop_strings_cut_constrained_output(self):
        # The grammar allows one text; a stop string inside it ends every sample there, whole and
        # streamed, with finish_reason "stop" (the grammar is not asked to be complete).
        regex = r'\{"city": "Paris", "zone": "CET"\}'
        r = self.chat(3, 41, extra_body={"guided_regex": regex}, stop=['", "zone'])
        for c in r.choices:
            self.assertEqual((c.message.content, c.finish_reason), ('{"city": "Paris', "stop"))
        text, finish = "", None
        for chunk in self.chat(1, 42, extra_body={"guided_regex": regex}, stop=["CET"],
                               stream=True):
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        self.assertEqual((text, finish), ('{"city": "Paris", "zone": "', "stop"))

    def test_json_object_and_vllm_guided_json(self):
        # Any JSON object: its strings are unbounded, so a random model may still be inside one
        # at max_tokens; the samples it finished are objects.
        r = self.chat(10, 7, response_format={"type": "json_object"})
        finished = [c for c in r.choices if c.finish_reason == "stop"]
        self.assertGreater(len(finished), 0)
        for c in finished:
            self.assertIsInstance(json.loads(c.message.content), dict, c.message.content)
        for c in r.choices:
            self.assertTrue(c.message.content.startswith("{"), c.message.content)
        schema = SCHEMAS[1]
        for body in ({"guided_json": schema}, {"guided_json": json.dumps(schema)},
                     {"structured_outputs": {"json": schema}}):
            r = self.chat(4, 8, extra_body=body)
            for c in r.choices:
                jsonschema.validate(json.loads(c.message.content), schema)

    def test_regex_and_choice_samples_match(self):
        for i, pattern in enumerate(REGEXES):
            r = self.chat(8, 200 + i, extra_body={"guided_regex": pattern})
            for c in r.choices:
                self.assertIsNotNone(re.fullmatch(pattern, c.message.content),
                                     f"{pattern!r}: {c.message.content!r}")
        r = self.chat(10, 300, extra_body={"guided_choice": CHOICES})
        for c in r.choices:
            self.assertIn(c.message.content, CHOICES)
        grammar = 'root ::= ("yes" | "no") "!"{1,3} " " item\nitem ::= [a-c]{2}'
        r = self.chat(6, 302, extra_body={"guided_grammar": grammar})
        for c in r.choices:
            self.assertIsNotNone(re.fullmatch(r"(yes|no)!{1,3} [a-c]{2}", c.message.content),
                                 c.message.content)
        completion = self.client.completions.create(
            model="tiny-llama", prompt="The answer:", n=6, seed=301, temperature=1.0,
            max_tokens=20, extra_body={"structured_outputs": {"regex": REGEXES[0]}})
        for c in completion.choices:
            self.assertIsNotNone(re.fullmatch(REGEXES[0], c.text), c.text)

    def test_members_come_in_the_schemas_order_on_every_route(self):
        schema = {"type": "object", "properties": {"zeta": INT, "alpha": INT},
                  "required": ["zeta", "alpha"], "additionalProperties": False}
        r = self.chat(2, 13, response_format={"type": "json_schema",
                                              "json_schema": {"name": "o", "schema": schema}})
        c = self.client.completions.create(model="tiny-llama", prompt="JSON:", n=2, seed=14,
                                           temperature=1.0, max_tokens=100,
                                           extra_body={"guided_json": schema})
        texts = [x.message.content for x in r.choices] + [x.text for x in c.choices]
        status, _, body = self.server.post("/generate", json.dumps(
            {"inputs": "JSON:", "parameters": {"grammar": {"type": "json", "value": schema},
                                               "max_new_tokens": 100, "do_sample": True,
                                               "seed": 15}}))
        self.assertEqual(status, 200, body)
        texts.append(json.loads(body)["generated_text"])
        for text in texts:
            self.assertTrue(text.startswith('{"zeta":'), text)
            jsonschema.validate(json.loads(text), schema)

    def test_streamed_deltas_assemble_a_valid_document(self):
        schema = SCHEMAS[8]
        stream = self.chat(2, 9, stream=True, response_format={
            "type": "json_schema", "json_schema": {"name": "user", "schema": schema}})
        texts = {}
        for chunk in stream:
            for c in chunk.choices:
                texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
        self.assertEqual(sorted(texts), [0, 1])
        for text in texts.values():
            jsonschema.validate(json.loads(text), schema)

    def test_tgi_grammar(self):
        schema = SCHEMAS[3]
        status, _, body = self.server.post("/generate", {
            "inputs": "Colour:", "parameters": {"grammar": {"type": "json", "value": schema},
                                                "max_new_tokens": 60, "do_sample": True,
                                                "seed": 11}})
        self.assertEqual(status, 200, body)
        jsonschema.validate(json.loads(json.loads(body)["generated_text"]), schema)
        status, _, body = self.server.post("/generate", {
            "inputs": "Code:", "parameters": {"grammar": {"type": "regex", "value": REGEXES[0]},
                                              "max_new_tokens": 20, "do_sample": True,
                                              "seed": 12}})
        self.assertEqual(status, 200, body)
        self.assertIsNotNone(re.fullmatch(REGEXES[0], json.loads(body)["generated_text"]))

    def test_what_kiln_cannot_compile_fails_naming_it(self):
        cases = [
            ({"response_format": {"type": "json_schema", "json_schema": {
                "name": "p", "schema": {"type": "string", "pattern": "a(?=b)"}}}},
             "'pattern'"),
            ({"guided_regex": r"(a)\1"}, "backreference"),
            ({"guided_choice": []}, "guided_choice"),
            ({"guided_json": {"type": "object"}, "guided_regex": "a"},
             "cannot be used together"),
        ]
        for body, expected in cases:
            payload = {"model": "tiny-llama", "messages": PROMPT, "max_tokens": 5, **body}
            status, _, raw = self.server.post("/v1/chat/completions", payload)
            self.assertEqual(status, 400, raw)
            self.assertIn(expected, json.loads(raw)["error"]["message"])


if __name__ == "__main__":
    h.run_tests()
