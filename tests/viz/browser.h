// Headless Chromium for the view tests: a page's DOM after its scripts ran, and
// screenshots beside it in the build folder.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "test_util.h"

namespace attend::test {

namespace fs = std::filesystem;

// A profile folder of this process's own: two Chromiums on one profile (ctest -j2 runs
// test cases side by side) make the second exit with status 21.
inline fs::path chromium_profile() {
  return fs::path(ATTEND_BUILD_DIR) / ("chromium-profile-" + std::to_string(::getpid()));
}

// The page's DOM after its scripts ran ("" with a skip when Chromium is
// missing) and a screenshot beside it in the build folder.
struct Browser {
  std::string exe, flags;
  bool ok = false;
  Browser() {
    const char* chromium = std::getenv("ATTEND_CHROMIUM");
    exe = chromium ? chromium : "/usr/bin/chromium";
    ok = fs::exists(exe);
    flags =
        " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
        "--disable-background-networking --disable-component-update --disable-sync "
        "--user-data-dir=" +
        chromium_profile().string();
  }
  ~Browser() {
    std::error_code ec;
    fs::remove_all(chromium_profile(), ec);
  }
  Browser(const Browser&) = delete;
  Browser& operator=(const Browser&) = delete;
  std::string dom(const fs::path& page) const {
    const fs::path out = page.string() + ".dom";
    REQUIRE(std::system((exe + flags + " --dump-dom file://" + page.string() + " > " +
                         out.string() + " 2>/dev/null")
                            .c_str()) == 0);
    std::ifstream in(out);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  void screenshot(const fs::path& page, const fs::path& png, const std::string& size) const {
    std::system((exe + flags + " --window-size=" + size + " --screenshot=" + png.string() +
                 " file://" + page.string() + " > /dev/null 2>&1")
                    .c_str());
    CHECK(fs::exists(png));
    MESSAGE("screenshot: ", png.string());
  }
};

// Declares `b`, a Browser, or reports the test skipped (and returns) when Chromium is missing.
#define REQUIRE_BROWSER(b)                                  \
  Browser b;                                                \
  if (!b.ok) ATTEND_SKIP("Chromium not found at " + b.exe)



}  // namespace attend::test
