// A generation plan's final hidden states on the cpu (runtime/exec/step.h
// SequenceStep::wantsHidden: the lm_head's input, what an embedding taken from a generation model
// pools) against transformers' last_hidden_state (tools/goldens/make_hidden_state_goldens.py),
// alone and batched; a plan that cannot give them refuses the step naming the sequence.
// cuda_golden_test runs the same check on the CUDA backend.
#include "tests/e2e/hidden_states_util.h"

#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR);

TEST(HiddenStates, TinyLlamaMatchesTransformersAloneAndBatched) {
  checkGoldenHiddenStates("tiny-llama", "cpu");
}

TEST(HiddenStates, AnEmbeddingPlanRefusesToGiveThemTwice) {
  LoadedArtifact loaded = loadForTest(compileForTest(kData + "/models/tiny-bert"), 16);
  ASSERT_TRUE(loaded.executor);
  EXPECT_EQ(loaded.executor->limits().hiddenWidth, 0);
  rt::SequenceStep seq;
  seq.tokenIds = {2, 7, 3};
  seq.blockTables = rt::ownBlockTables(loaded.executor->limits(), 0, 1);
  seq.wantsHidden = true;
  Result<rt::StepOutput> out = loaded.executor->execute({{seq}});
  ASSERT_FALSE(out.isOk());
  EXPECT_NE(out.status().message().find("sequence 0 wants its final hidden states; this plan "
                                        "cannot return them"),
            std::string::npos)
      << out.status().message();
}

} // namespace
} // namespace kiln::e2e
