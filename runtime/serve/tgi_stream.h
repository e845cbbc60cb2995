// TGI's /generate_stream events (SSE, no [DONE]) and SageMaker LMI JSON lines, one event per
// generated token; the last one carries generated_text (and details).
#pragma once

#include "runtime/serve/sse.h"
#include "runtime/serve/stream_session.h"
#include "runtime/serve/tgi_response.h"

#include <memory>

namespace kiln::rt::serve {

enum class TgiStreamStyle { kTgiSse, kLmiJsonLines };

std::unique_ptr<StreamFormatter> makeTgiStream(TgiContext context, TgiStreamStyle style);

} // namespace kiln::rt::serve
