"""Qwen2.5, Mistral-7B-Instruct-v0.3, Phi-3-mini, Gemma 2 and Gemma (v1) served end to end with
their real tokenizer and chat template: /v1/chat/completions reports the prompt ids transformers'
apply_chat_template gives.

For each tokenizer of tests/data/golden/chat_prompt_ids.json (written by
tools/goldens/make_chat_prompt_goldens.py): tools/bench/make_random_model.py writes the golden's
`tiny_model` (1 layer, hidden 16, the published vocab size, the family's real tensor names) into a
temporary directory with tokenizer.json / tokenizer_config.json / special_tokens_map.json copied
from $ASSETS/tokenizers/<name> (never into the repository), and, where the golden's entry names a
`chat_template` file (Gemma 2: the assets' tokenizer_config.json has none, so google/gemma-2-2b-it's
template from $ASSETS/chat_templates), that file as chat_template.jinja. Where the entry names
`tokenizer_json_from` (Gemma v1: the assets hold only its tokenizer_config.json, with the
Gemma instruct template, and special_tokens_map.json), tokenizer.json comes from that directory
(tokenizers/gemma2: the same 256000-piece vocabulary, checked by the generator and recorded in the
entry's `tokenizer_json_evidence`) and the two config files from the entry's own; the template is
then tokenizer_config.json's, with no chat_template.jinja. `kiln compile` builds it,
`kiln serve` serves it, and each conversation goes through the openai client with
return_token_ids. The server's `prompt_token_ids` must equal the golden ids exactly. Where the
template raised for a conversation in transformers (the golden stores it as `skipped`: Gemma 2's
template rejects a system message with raise_exception('System role not supported')), the server
must refuse it the same way: HTTP 400 (openai.BadRequestError) whose message carries the template's
error text. Qwen2.5 and Mistral also get the golden's tool conversations (a get_weather function
whose JSON schema keys are not in sorted order) sent with the client's `tools=`: their templates
print the tools as JSON in the order given; and a call with its result rendered back (role
"tool"), the call's arguments sent as JSON text as OpenAI clients send them.

The API does not return the rendered prompt text, so the text is checked through the tokenizer:
`kiln tokenize --no-special` of the golden text must give the same ids. Together the two say the
template rendered text that tokenizes like transformers' rendering, and when only the server's ids
differ, the chat template (runtime/text/chat_template.cc) is the one at fault, not the tokenizer.

Which ids kiln must match. kiln implements the Hugging Face `tokenizers` library's semantics of
tokenizer.json (runtime/text), so where the golden stores `tokenizer_json_ids` (tokenizer.json run
by `tokenizers` on the rendered text, add_special_tokens=False), those are the ids to match. That is
Phi-3-mini's case: transformers 5 loads it as LlamaTokenizer and rebuilds the pipeline from that
class's defaults, without the Prepend("\u2581") normalizer tokenizer.json declares, so the word
after a special token loses its leading "\u2581" ("You" 3492 instead of "\u2581You" 887).
tokenizer.json is what the checkpoint ships and what transformers 4.x (LlamaTokenizerFast), and so
vLLM and TGI on it, run; the transformers 5 ids are a property of that transformers release, not of
the model's tokenizer. For Qwen2.5, Mistral and Gemma 2 the two agree and the golden stores one
list.

The chat path encodes the rendered text without adding BOS (the templates write it themselves:
Mistral's text starts with "<s>", Gemma 2's with "<bos>", though both tokenizer_config.json files
set add_bos_token), as apply_chat_template(tokenize=True) does.

Gemma 2's 256000-row embedding makes its artifact about 16 MB (F32, hidden 16) besides the 17.5 MB
tokenizer.json; it is compiled with the same --max-seq-len as the others. Gemma (v1)'s tiny model is
Gemma 2's (kiln compiles no GemmaForCausalLM; the prompt ids do not depend on the architecture), so
its artifact is the same size.

Labels cpu and model: it reads $ASSETS/tokenizers. Without them it skips, saying so, except where
CI is set (CI=true, as CI services set it): there a missing tokenizer fails.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import openai

import serve_harness as h

kTokenizers = ("qwen2.5", "mistral-7b-instruct-v0.3", "phi3-mini", "gemma2", "gemma")


def onCi():
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def goldenPath():
    return os.path.join(h.ARGS.repo, "tests", "data", "golden", "chat_prompt_ids.json")


def loadGenerator():
    path = os.path.join(h.ARGS.repo, "tools", "bench", "make_random_model.py")
    spec = importlib.util.spec_from_file_location("make_random_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def openAiMessages(messages):
    """The golden's messages as an OpenAI client sends them: a tool call's arguments as JSON text
    (the golden renders them as the object transformers' templates expect; the server converts)."""
    out = []
    for m in messages:
        m = json.loads(json.dumps(m))
        for call in m.get("tool_calls") or []:
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
        out.append(m)
    return out


def templateError(case):
    """The error text of a skipped case: "TemplateError: System role not supported" -> "System role
    not supported" (the exception's message, without transformers' exception class)."""
    kind, sep, message = case["skipped"].partition(": ")
    return message if sep else kind


def expectedIds(case):
    """tokenizer.json's ids where transformers' differ (see the module docstring), else the ids."""
    return case.get("tokenizer_json_ids", case["ids"])


class ChatFamiliesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(goldenPath()) as f:
            cls.golden = json.load(f)
        cls.generator = loadGenerator()
        cls.scratch = tempfile.TemporaryDirectory(dir=h.ARGS.work, prefix="chat-families-")

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def tokenizerDir(self, name):
        """The directory whose tokenizer files go into the model: the golden entry's `dir` under
        the assets, or for an entry with `tokenizer_json_from` a scratch directory with that
        directory's tokenizer.json and `dir`'s tokenizer_config.json and special_tokens_map.json,
        as the generator assembled it."""
        entry = self.golden["tokenizers"][name]
        path = os.path.join(h.ARGS.assets, entry["dir"].removeprefix("shared:"))
        source = entry.get("tokenizer_json_from")
        if source is None:
            needed = [os.path.join(path, "tokenizer.json")]
        else:
            needed = [os.path.join(h.ARGS.assets, source.removeprefix("shared:"), "tokenizer.json"),
                      os.path.join(path, "tokenizer_config.json"),
                      os.path.join(path, "special_tokens_map.json")]
        missing = [p for p in needed if not os.path.isfile(p)]
        if missing:
            message = f"{', '.join(missing)} absent (the shared assets are not here)"
            if onCi():
                self.fail(message + "; CI is set, so a missing asset is a failure")
            self.skipTest(message)
        if source is None:
            return path
        # The substitution is for a tokenizer that has none of its own.
        self.assertFalse(os.path.exists(os.path.join(path, "tokenizer.json")),
                         f"{path} has a tokenizer.json; the golden's tokenizer_json_from is stale")
        out = os.path.join(self.scratch.name, f"{name}-tokenizer")
        os.makedirs(out, exist_ok=True)
        for src in needed:  # copyfile, not copy: the assets are read-only
            shutil.copyfile(src, os.path.join(out, os.path.basename(src)))
        return out

    def compileTinyModel(self, name, tokenizerDir):
        """The golden's tiny_model with the real tokenizer, compiled; returns the artifact."""
        cfg, gen, tensors = self.generator.chatGoldenModel(goldenPath(), name)
        plan = self.generator.buildPlan(cfg, gen, "fp32", self.generator.mrl.kDefaultMaxShardBytes)
        self.generator.checkAgainstGolden(plan, tensors)
        # The template the golden was rendered with where the tokenizer has none of its own.
        chatTemplate = self.generator.chatGoldenTemplate(goldenPath(), name, h.ARGS.assets)
        if chatTemplate is not None and not os.path.isfile(chatTemplate):
            message = f"{chatTemplate} is absent (the shared assets are not here)"
            if onCi():
                self.fail(message + "; CI is set, so a missing asset is a failure")
            self.skipTest(message)
        modelDir = os.path.join(self.scratch.name, name)
        copied = self.generator.writeModel(plan, modelDir, seed=7, tokenizerDir=tokenizerDir,
                                           chatTemplate=chatTemplate)
        self.assertIn("tokenizer_config.json", copied)
        if chatTemplate is not None:
            self.assertIn("chat_template.jinja", copied)
        artifact = modelDir + ".kiln"
        out = subprocess.run([h.ARGS.kiln, "compile", modelDir, "-o", artifact, "--max-batch", "4",
                              "--max-seq-len", "512", "--quiet"],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, f"kiln compile {modelDir}: {out.stderr}")
        return artifact

    def tokenizeText(self, artifact, text):
        out = subprocess.run([h.ARGS.kiln, "tokenize", artifact, "--no-special"],
                             input=text.encode(), capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        return [int(i) for i in out.stdout.split()]

    def checkTokenizer(self, name, toolCases=0, skipped=()):
        """Every conversation of the golden for `name` through the server; `toolCases` is how many
        tool conversations (tool_cases, sent with the client's tools=) the golden must hold, and
        `skipped` the conversations whose template raised in transformers: the server must answer
        those 400 with the template's error."""
        entry = self.golden["tokenizers"][name]
        artifact = self.compileTinyModel(name, self.tokenizerDir(name))
        cases = [c for c in entry["cases"] if "ids" in c]
        refused = [c for c in entry["cases"] if "ids" not in c]
        self.assertEqual(sorted(c["conversation"] for c in refused), sorted(skipped),
                         f"{name}: the conversations the golden skipped")
        self.assertEqual(len(cases) + len(refused), len(self.golden["conversations"]))
        withTools = [c for c in entry.get("tool_cases", []) if "ids" in c]
        self.assertEqual(len(withTools), toolCases, f"{name}: the golden's tool conversations")
        requests = [(c, self.golden["conversations"][c["conversation"]], None) for c in cases]
        for case in withTools:
            conversation = self.golden["tool_conversations"][case["conversation"]]
            requests.append((case, openAiMessages(conversation["messages"]),
                             conversation["tools"]))
        with h.Server(artifact, "--kv-cache-mb", "16") as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                                   timeout=120)
            model = client.models.list().data[0].id
            for case, messages, tools in requests:
                want = expectedIds(case)
                conversation = case["conversation"]
                # The tools go as the client's own parameter, so they reach the server in the
                # order written here (keys not sorted: the templates print them with tojson).
                toolArgs = {"tools": tools} if tools else {}
                with self.subTest(tokenizer=name, conversation=conversation, check="server"):
                    r = client.chat.completions.create(
                        model=model, messages=messages, max_tokens=1, temperature=0,
                        extra_body={"return_token_ids": True}, **toolArgs)
                    self.assertEqual(r.prompt_token_ids, want, "the server's chat prompt ids")
                    self.assertEqual(r.usage.prompt_tokens, len(want))
                with self.subTest(tokenizer=name, conversation=conversation, check="text"):
                    self.assertEqual(self.tokenizeText(artifact, case["text"]), want,
                                     "kiln tokenize of transformers' rendered text")
            for case in refused:
                conversation = case["conversation"]
                with self.subTest(tokenizer=name, conversation=conversation, check="refused"):
                    with self.assertRaises(openai.BadRequestError) as raised:
                        client.chat.completions.create(
                            model=model, messages=self.golden["conversations"][conversation],
                            max_tokens=1, temperature=0, extra_body={"return_token_ids": True})
                    self.assertEqual(raised.exception.status_code, 400)
                    self.assertIn(templateError(case), raised.exception.message,
                                  f"the template's error (transformers: {case['skipped']})")
            if refused:  # and it goes on serving after refusing
                r = client.chat.completions.create(
                    model=model, messages=self.golden["conversations"][cases[0]["conversation"]],
                    max_tokens=1, temperature=0, extra_body={"return_token_ids": True})
                self.assertEqual(r.prompt_token_ids, expectedIds(cases[0]))
            self.assertEqual(server.stop(), 0)

    def test_qwen2_5(self):
        self.checkTokenizer("qwen2.5", toolCases=2)

    def test_mistral_7b_instruct_v0_3(self):
        self.checkTokenizer("mistral-7b-instruct-v0.3", toolCases=2)

    def test_phi3_mini(self):
        entry = self.golden["tokenizers"]["phi3-mini"]
        # The golden's own record of the difference the module docstring explains.
        self.assertFalse(entry["tokenizer_json_agrees"])
        self.checkTokenizer("phi3-mini")

    def test_gemma2(self):
        entry = self.golden["tokenizers"]["gemma2"]
        # No template in the assets' tokenizer_config.json: the golden names gemma-2-2b-it's.
        self.assertEqual(entry["chat_template"], "shared:chat_templates/google-gemma-2-2b-it.jinja")
        self.assertTrue(entry["tokenizer_json_agrees"])
        # Its template raises for a system message (raise_exception('System role not supported')).
        self.checkTokenizer("gemma2", skipped=("system_user",))

    def test_gemma(self):
        entry = self.golden["tokenizers"]["gemma"]
        # The assets' Gemma (v1) has no tokenizer.json: Gemma 2's (the same vocabulary, checked by
        # the generator), with Gemma's own tokenizer_config.json and special_tokens_map.json.
        self.assertEqual(entry["dir"], "shared:tokenizers/gemma")
        self.assertEqual(entry["tokenizer_json_from"], "shared:tokenizers/gemma2")
        self.assertEqual(entry["tokenizer_json_evidence"]["template_tokens"],
                         {"<bos>": 2, "<start_of_turn>": 106, "<end_of_turn>": 107})
        # The template is tokenizer_config.json's own (no chat_template file, no
        # chat_template.jinja): the path Gemma 2's test does not take.
        self.assertNotIn("chat_template", entry)
        self.assertTrue(entry["tokenizer_json_agrees"])
        # Its template (the same text as gemma-2-2b-it's, read from tokenizer_config.json here)
        # raises for a system message.
        self.checkTokenizer("gemma", skipped=("system_user",))

    def test_every_golden_tokenizer_is_covered(self):
        self.assertEqual(sorted(self.golden["tokenizers"]), sorted(kTokenizers))


def main():
    argv = h.parse_args()
    try:
        import numpy  # noqa: F401  (make_random_model.py writes the weights with it)
    except ImportError:
        print(f"skip: {sys.executable} cannot import numpy; run scripts/python-test-deps.sh")
        sys.exit(77)
    if not os.path.isdir(os.path.join(h.ARGS.assets, "tokenizers")) and not onCi():
        print(f"skip: {h.ARGS.assets}/tokenizers is absent (the shared assets are not here)")
        sys.exit(77)
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
