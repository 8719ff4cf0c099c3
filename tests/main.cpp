// doctest's main, plus two guards. A run whose filters match no test case fails: CTest
// runs each test case by name, so a name that CTest mangles (a ';' splits it) would
// otherwise run nothing and pass. A run in which a test called test::skip (its checker
// is missing) and nothing failed exits 77, CTest's SKIP_RETURN_CODE: reported as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "test_util.h"

namespace {

int g_matched = -1;

struct MatchCounter : doctest::IReporter {
  explicit MatchCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    g_matched = static_cast<int>(s.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("match_counter", 1, MatchCounter);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit()) return rc;
  if (g_matched == 0) {
    std::fprintf(stderr, "no test case matches the given filters: nothing was tested\n");
    return rc != 0 ? rc : 3;
  }
  if (rc == 0 && attend::test::skip_flag()) return 77;
  return rc;
}
