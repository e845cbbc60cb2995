// OpenAI streaming: completion and chat chunks, the include_usage chunk, data: [DONE]. The same
// chunks go out as JSON lines when SageMaker is configured for them.
#pragma once

#include "runtime/serve/openai_response.h"
#include "runtime/serve/sse.h"
#include "runtime/serve/stream_session.h"

#include <memory>

namespace kiln::rt::serve {

struct OpenAiStreamContext {
  ResponseHeader header;
  const GenerationRequest *request = nullptr; // outlives the stream
  const ServeModel *model = nullptr;
  Framing framing = Framing::kSse;
};

std::unique_ptr<StreamFormatter> makeCompletionStream(OpenAiStreamContext context);
std::unique_ptr<StreamFormatter> makeChatStream(OpenAiStreamContext context);

} // namespace kiln::rt::serve
