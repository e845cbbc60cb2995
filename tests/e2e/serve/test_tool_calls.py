"""OpenAI tool calling through `kiln serve` (runtime/serve/tool_request.h, tool_call_parser.h) on
the random-weight tiny-llama, with the official openai client: tool_choice "required" and a named
function constrain every sample (200 at temperature 1 over 25 seeds, and more) into calls of the request's tools
whose arguments validate against the tool's JSON schema with the reference validator (the
`jsonschema` package); streamed calls reassemble to the same; "auto" with `--tool-call-parser
hermes` reads <tool_call> blocks the model writes (here forced by a regex, standing in for a
trained model) into tool_calls, whole and streamed; a call and its result go back to the server
as the client's own message objects; an unknown --tool-call-parser stops the server naming it."""
import json
import os
import subprocess
import tempfile
import unittest

import jsonschema
import openai

import serve_harness as h

PROMPT = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 10},
                                      "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a timezone.",
        "parameters": {"type": "object",
                       "properties": {"zone": {"type": "string", "pattern": "[A-Z]{3}"},
                                      "hour24": {"type": "boolean"}},
                       "required": ["zone", "hour24"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds integers.",
        "parameters": {"type": "object",
                       "properties": {"terms": {"type": "array", "items": {"type": "integer"},
                                                "minItems": 2, "maxItems": 4}},
                       "required": ["terms"], "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
HERMES = (r'Let me check\.\n<tool_call>\n\{"name": "get_weather", "arguments": '
          r'\{"city": "Paris", "unit": "celsius"\}\}\n</tool_call>')
# A template that renders calls and tool results (the test template of the other tests writes
# only string contents).
TOOL_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "{{ c.function.name + ' ' + (c.function.arguments | tojson) + '\\n' }}{% endfor %}"
    "{% else %}{{ m['content'] + '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")


class ToolCallsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.artifact = h.tiny_artifact()
        cls.scratch = tempfile.TemporaryDirectory(dir=h.ARGS.work, prefix="tool-calls-")
        template = os.path.join(cls.scratch.name, "tools.jinja")
        with open(template, "w") as f:
            f.write(TOOL_TEMPLATE)
        cls.server = h.Server(cls.artifact, "--chat-template", template,
                              "--tool-call-parser", "hermes").__enter__()
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused",
                                   max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        cls.server.__exit__(None, None, None)
        cls.scratch.cleanup()
        assert code == 0, f"kiln serve exited {code}"

    def chat(self, n, seed, **kwargs):
        return self.client.chat.completions.create(
            model="tiny-llama", messages=PROMPT, tools=TOOLS, n=n, seed=seed, temperature=1.0,
            max_tokens=200, **kwargs)

    def checkCall(self, call):
        self.assertEqual(call.type, "function")
        self.assertTrue(call.id.startswith("call_"), call.id)
        self.assertIn(call.function.name, SCHEMAS)
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])

    def test_required_calls_validate(self):
        # One call a sample: each ends (every string and array of the schemas is bounded).
        calls, names = 0, set()
        for seed in range(25):
            r = self.chat(8, 300 + seed, tool_choice="required", parallel_tool_calls=False)
            for c in r.choices:
                with self.subTest(seed=seed, sample=c.index):
                    self.assertEqual(c.finish_reason, "tool_calls")
                    self.assertIsNone(c.message.content)
                    self.assertEqual(len(c.message.tool_calls), 1)
                    self.checkCall(c.message.tool_calls[0])
                    calls += 1
                    names.add(c.message.tool_calls[0].function.name)
        self.assertEqual(calls, 200)
        self.assertEqual(names, set(SCHEMAS))  # every tool is reachable

    def test_parallel_required_calls_validate(self):
        # Any number of calls: a random model may still be adding calls at max_tokens (its text
        # is then the content, as vLLM answers); the samples that ended hold valid calls.
        ended, several = 0, 0
        for seed in range(3):
            r = self.chat(8, 350 + seed, tool_choice="required")
            for c in r.choices:
                with self.subTest(seed=seed, sample=c.index):
                    if c.finish_reason == "length":
                        self.assertIsNone(c.message.tool_calls)
                        self.assertTrue(c.message.content.startswith("[{"), c.message.content)
                        continue
                    self.assertEqual(c.finish_reason, "tool_calls")
                    for call in c.message.tool_calls:
                        self.checkCall(call)
                    ended += 1
                    several += len(c.message.tool_calls) > 1
        self.assertGreaterEqual(ended, 12)
        self.assertGreaterEqual(several, 3)

    def test_named_function_calls_validate(self):
        for name in SCHEMAS:
            choice = {"type": "function", "function": {"name": name}}
            r = self.chat(8, 400, tool_choice=choice)
            for c in r.choices:
                with self.subTest(name=name, sample=c.index):
                    self.assertEqual(c.finish_reason, "stop")
                    self.assertEqual(len(c.message.tool_calls), 1)
                    self.assertEqual(c.message.tool_calls[0].function.name, name)
                    self.checkCall(c.message.tool_calls[0])

    def streamed(self, pieces=None, **kwargs):
        """(content, [(name, arguments)], finish_reason) of one streamed choice; `pieces`, a
        list, gets the number of chunks each call came in."""
        content, calls, finish = "", {}, None
        for chunk in self.chat(1, 500, stream=True, **kwargs):
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"name": None, "arguments": "", "pieces": 0})
                if call.function.name:
                    entry["name"] = call.function.name
                entry["arguments"] += call.function.arguments or ""
                entry["pieces"] += 1
            finish = chunk.choices[0].finish_reason or finish
        if pieces is not None:
            pieces.extend(c["pieces"] for _, c in sorted(calls.items()))
        return content, [(c["name"], c["arguments"]) for _, c in sorted(calls.items())], finish

    def test_streamed_calls_match(self):
        for choice in ("required", {"type": "function", "function": {"name": "add"}}):
            whole = self.chat(1, 500, tool_choice=choice).choices[0]
            pieces = []
            content, calls, finish = self.streamed(pieces, tool_choice=choice)
            # The arguments stream as they are generated, not whole when the call closes.
            self.assertTrue(all(p > 2 for p in pieces), pieces)
            self.assertEqual(content, whole.message.content or "")
            self.assertEqual(calls, [(c.function.name, c.function.arguments)
                                     for c in whole.message.tool_calls])
            self.assertEqual(finish, whole.finish_reason)

    def test_auto_reads_hermes_calls(self):
        r = self.chat(2, 600, extra_body={"guided_regex": HERMES})
        for c in r.choices:
            self.assertEqual(c.finish_reason, "tool_calls")
            self.assertEqual(c.message.content, "Let me check.\n")
            self.assertEqual(len(c.message.tool_calls), 1)
            call = c.message.tool_calls[0]
            self.assertEqual(call.function.name, "get_weather")
            self.assertEqual(json.loads(call.function.arguments),
                             {"city": "Paris", "unit": "celsius"})
        content, calls, finish = self.streamed(extra_body={"guided_regex": HERMES})
        self.assertEqual(content, "Let me check.\n")
        self.assertEqual([(n, json.loads(a)) for n, a in calls],
                         [("get_weather", {"city": "Paris", "unit": "celsius"})])
        self.assertEqual(finish, "tool_calls")
        r = self.chat(1, 600, tool_choice="none", extra_body={"guided_regex": HERMES})
        self.assertIsNone(r.choices[0].message.tool_calls)
        self.assertIn("<tool_call>", r.choices[0].message.content)

    def promptIds(self, messages):
        r = self.client.chat.completions.create(
            model="tiny-llama", messages=messages, tools=TOOLS, max_tokens=1, temperature=0,
            extra_body={"return_token_ids": True})
        return r.prompt_token_ids

    def test_call_and_result_go_back(self):
        first = self.chat(1, 700, tool_choice="required").choices[0].message
        call = first.tool_calls[0]
        result = {"role": "tool", "tool_call_id": call.id, "content": "22 C"}
        sent = PROMPT + [first.model_dump(exclude_none=True), result]
        # The arguments come back as JSON text, as OpenAI clients send them; the server renders
        # them as the object templates expect (like vLLM), so the prompt is the one the object
        # gives, not the one of a quoted string.
        asObject = json.loads(json.dumps(sent))
        asObject[1]["tool_calls"][0]["function"]["arguments"] = json.loads(call.function.arguments)
        asText = json.loads(json.dumps(sent))
        asText[1]["tool_calls"][0]["function"]["arguments"] = "not json: " + call.function.arguments
        ids = self.promptIds(sent)
        self.assertEqual(ids, self.promptIds(asObject))
        self.assertNotEqual(ids, self.promptIds(asText))

    def test_unknown_parser_stops_the_server(self):
        out = subprocess.run([h.ARGS.kiln, "serve", self.artifact, "--port", "0",
                              "--tool-call-parser", "pythonic"], capture_output=True, timeout=120)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(b"--tool-call-parser", out.stderr)
        self.assertIn(b"hermes, llama3_json, mistral, none", out.stderr)


if __name__ == "__main__":
    h.run_tests()
