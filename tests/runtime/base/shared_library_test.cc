// SharedLibrary: symbols resolve from a library that loads, a missing library or symbol is a
// value (the dlopen text or nullptr), and ownership moves with the handle.
#include "runtime/base/shared_library.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln {
namespace {

TEST(SharedLibraryTest, ResolvesSymbolsOfALoadedLibrary) {
  Result<SharedLibrary> libm = SharedLibrary::open("libm.so.6");
  ASSERT_TRUE(libm.isOk()) << libm.status().toString();
  EXPECT_EQ(libm->name(), "libm.so.6");
  auto cosine = reinterpret_cast<double (*)(double)>(libm->symbol("cos"));
  ASSERT_NE(cosine, nullptr);
  EXPECT_EQ(cosine(0.0), 1.0);
  EXPECT_EQ(libm->symbol("kiln_no_such_symbol"), nullptr);
}

TEST(SharedLibraryTest, AMissingLibraryIsAnErrorWithDlopensText) {
  Result<SharedLibrary> missing = SharedLibrary::open("/nonexistent/libkiln-missing.so");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("/nonexistent/libkiln-missing.so"), std::string::npos)
      << missing.status().message();
}

TEST(SharedLibraryTest, OwnershipMovesWithTheHandle) {
  Result<SharedLibrary> libm = SharedLibrary::open("libm.so.6");
  ASSERT_TRUE(libm.isOk());
  SharedLibrary moved = std::move(libm).value();
  EXPECT_NE(moved.symbol("cos"), nullptr);
  SharedLibrary empty;
  EXPECT_EQ(empty.symbol("cos"), nullptr);
  empty = std::move(moved);
  EXPECT_NE(empty.symbol("cos"), nullptr);
  EXPECT_EQ(moved.symbol("cos"), nullptr); // NOLINT(bugprone-use-after-move): moved-from is empty
}

} // namespace
} // namespace kiln
