#include "runtime/serve/openai_stream.h"

#include "runtime/serve/json_text.h"
#include "runtime/serve/tool_request.h"

#include <algorithm>
#include <map>
#include <optional>

namespace kiln::rt::serve {
namespace {

// What both OpenAI streams share: framing, the error event, the usage chunk and [DONE].
class OpenAiStreamBase : public StreamFormatter {
public:
  explicit OpenAiStreamBase(OpenAiStreamContext context, const char *object)
      : c_(std::move(context)), object_(object) {}

  std::string end(const std::vector<GenerationResult> &results) override {
    std::string out;
    if (c_.request->includeUsage)
      out += frame(usageChunk(c_.header, object_, totalUsage(results)));
    return out + doneMarker(c_.framing);
  }

protected:
  std::string frame(const nlohmann::json &payload) const {
    return frameEvent(c_.framing, dumpJson(payload));
  }
  // A failed sample reports OpenAI's error shape in the stream, as vLLM does.
  std::string errorEvent(const RequestOutput &output) const {
    ApiError error = errorFromStatus(output.error.isOk() ? internalError("generation failed")
                                                         : output.error);
    nlohmann::json body = nlohmann::json::parse(openAiErrorBody(error));
    return frame(body);
  }

  OpenAiStreamContext c_;
  const char *object_;
};

class CompletionStream : public OpenAiStreamBase {
public:
  explicit CompletionStream(OpenAiStreamContext context)
      : OpenAiStreamBase(std::move(context), "text_completion") {}

  // A batch's choices interleave; each chunk's index is prompt * n + sample.
  std::string output(size_t prompt, const RequestOutput &out,
                     const GenerationResult &soFar) override {
    if (out.finishReason == FinishReason::kError)
      return errorEvent(out);
    const SampleResult &sample = soFar.samples[out.index];
    bool first = sample.tokenIds.size() == out.tokenIds.size(); // this sample's first chunk
    std::string text = out.text;
    size_t offset = sample.text.size() - out.text.size();
    if (c_.request->echo) {
      std::string echo = echoText(c_.request->promptAt(prompt), soFar, *c_.model);
      offset += echo.size();
      if (first)
        text = echo + text;
    }
    int64_t n = std::max(c_.request->sampling.n, 1);
    nlohmann::json choice = {{"index", static_cast<int64_t>(prompt) * n + out.index},
                             {"text", sanitizeUtf8(text)},
                             {"logprobs", nullptr},
                             {"finish_reason", finishReasonJson(out.finishReason)}};
    if (c_.request->logprobs)
      choice["logprobs"] = completionLogprobsJson(out.tokenIds, out.logprobs, true, offset, *c_.model);
    if (c_.request->returnTokenIds) {
      if (first)
        choice["prompt_token_ids"] = soFar.promptIds;
      choice["token_ids"] = out.tokenIds;
    }
    return frame(completionChunk(c_.header, std::move(choice)));
  }
};

class ChatStream : public OpenAiStreamBase {
public:
  explicit ChatStream(OpenAiStreamContext context)
      : OpenAiStreamBase(std::move(context), "chat.completion.chunk") {}

  // The role comes first, in a chunk of its own per choice, as OpenAI sends it.
  std::string begin() override {
    std::string out;
    for (int32_t i = 0; i < std::max(c_.request->sampling.n, 1); ++i)
      out += frame(chatChunk(c_.header, {{"index", i},
                                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}));
    return out;
  }

  std::string output(size_t, const RequestOutput &out, const GenerationResult &) override {
    if (out.finishReason == FinishReason::kError)
      return errorEvent(out);
    bool finishing = out.finishReason != FinishReason::kNone;
    const ToolSettings &tools = c_.request->tools;
    bool readsTools = tools.choice == ToolSettings::Choice::kNamed ||
                      toolCallFormatFor(tools, c_.model->toolCallFormat()) != ToolCallFormat::kNone;
    nlohmann::json delta = nlohmann::json::object();
    bool called = false;
    if (readsTools) {
      called = toolDelta(out, finishing, delta);
    } else if (!out.text.empty() || !finishing) {
      delta["content"] = sanitizeUtf8(out.text);
    }
    if (delta.empty() && !finishing && !c_.request->logprobs)
      return {}; // a token whose text is still held back: nothing to say yet
    nlohmann::json choice = {
        {"index", out.index},
        {"delta", std::move(delta)},
        {"logprobs", nullptr},
        {"finish_reason", chatFinishReasonJson(out.finishReason, tools, called)}};
    if (c_.request->logprobs)
      choice["logprobs"] = chatLogprobsJson(out.tokenIds, out.logprobs, *c_.model);
    if (c_.request->returnTokenIds)
      choice["token_ids"] = out.tokenIds;
    return frame(chatChunk(c_.header, std::move(choice)));
  }

private:
  // One sample's tool-call reading: its parser (tool_choice "auto" / "required"), or for a named
  // function whether its call has been opened (the text is then the call's arguments).
  struct SampleTools {
    std::optional<ToolCallParser> parser;
    size_t calls = 0;
  };

  // Fills `delta` with what this output says as content and tool calls; true once the sample
  // has called a tool.
  bool toolDelta(const RequestOutput &out, bool finishing, nlohmann::json &delta) {
    const ToolSettings &tools = c_.request->tools;
    SampleTools &sample = samples_[out.index];
    ToolCallFormat idFormat = c_.model->toolCallFormat();
    if (tools.choice == ToolSettings::Choice::kNamed) {
      bool first = sample.calls == 0;
      if (!first && out.text.empty())
        return true;
      nlohmann::json call =
          first ? toolCallJson(newToolCallId(idFormat), {tools.namedFunction, out.text})
                : nlohmann::json{{"function", {{"arguments", sanitizeUtf8(out.text)}}}};
      call["index"] = 0;
      sample.calls = 1;
      delta["tool_calls"] = nlohmann::json::array({std::move(call)});
      return true;
    }
    if (!sample.parser)
      sample.parser.emplace(toolCallFormatFor(tools, c_.model->toolCallFormat()));
    ToolCallDelta said = sample.parser->feed(out.text);
    if (finishing) {
      ToolCallDelta last = sample.parser->finish();
      said.content += last.content;
      for (ToolCallFragment &fragment : last.fragments)
        said.fragments.push_back(std::move(fragment));
    }
    if (!said.content.empty())
      delta["content"] = sanitizeUtf8(said.content);
    // Calls go out piecewise (tool_call_parser.h): a call's first fragment opens it with its id
    // and name, the others add to its arguments.
    nlohmann::json calls = nlohmann::json::array();
    for (const ToolCallFragment &fragment : said.fragments) {
      if (!tools.parallel && fragment.call > 0)
        break;
      nlohmann::json entry =
          !fragment.opens
              ? nlohmann::json{{"function", {{"arguments", sanitizeUtf8(fragment.arguments)}}}}
              : toolCallJson(newToolCallId(idFormat), {fragment.name, fragment.arguments});
      entry["index"] = fragment.call;
      sample.calls = std::max(sample.calls, fragment.call + 1);
      if (!calls.empty() && calls.back()["index"] == entry["index"]) // one entry per call a chunk
        calls.back()["function"]["arguments"] =
            calls.back()["function"]["arguments"].get<std::string>() +
            entry["function"]["arguments"].get<std::string>();
      else
        calls.push_back(std::move(entry));
    }
    if (!calls.empty())
      delta["tool_calls"] = std::move(calls);
    return sample.calls > 0;
  }

  std::map<int32_t, SampleTools> samples_;
};

} // namespace

std::unique_ptr<StreamFormatter> makeCompletionStream(OpenAiStreamContext context) {
  return std::make_unique<CompletionStream>(std::move(context));
}

std::unique_ptr<StreamFormatter> makeChatStream(OpenAiStreamContext context) {
  return std::make_unique<ChatStream>(std::move(context));
}

} // namespace kiln::rt::serve
