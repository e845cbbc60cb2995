// Interrupted pulls (Ctrl-C, SIGTERM) leave DIR.pull-PID and friends beside the destination; the
// next pull removes those of processes that no longer run (runtime/store/transfer.h).
#include "runtime/store/transfer.h"
#include "tests/runtime/store/store_test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

namespace kiln::rt {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

// A pid that ran and has exited (reaped), so no process has it now.
pid_t deadPid() {
  pid_t child = ::fork();
  if (child == 0)
    ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST(PullTemporaries, OnlyDeadPullersLeftoversBesideTheDestinationAreRemoved) {
  TempDir tmp;
  const std::string dead = std::to_string(deadPid());
  const std::string alive = std::to_string(::getppid()); // our parent runs
  const std::vector<std::string> removed = {"m.kiln.pull-" + dead, "m.kiln.pull-" + dead + ".tar",
                                            "m.kiln.new-" + dead, "m.kiln.extract-" + dead};
  const std::vector<std::string> kept = {"m.kiln.pull-" + alive, "m.kiln.pull-abc",
                                         "other.kiln.pull-" + dead, "m.kiln"};
  for (const std::string &name : removed)
    fs::create_directories(tmp / (name + "/sub"));
  for (const std::string &name : kept)
    fs::create_directories(tmp / name);
  EXPECT_EQ(removeStalePullTemporaries(tmp / "m.kiln"), 4);
  for (const std::string &name : removed)
    EXPECT_FALSE(fs::exists(tmp / name)) << name;
  for (const std::string &name : kept)
    EXPECT_TRUE(fs::exists(tmp / name)) << name;
  EXPECT_EQ(removeStalePullTemporaries(tmp / "m.kiln/"), 0); // a trailing '/'
}

} // namespace
} // namespace kiln::rt
