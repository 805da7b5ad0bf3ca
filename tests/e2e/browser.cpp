#include "browser.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "e2e/process.h"
#include "e2e/twin_hub.h"
#include "testutil/files.h"

namespace vkllm::test {

namespace fs = std::filesystem;

namespace {

ChildResult chromium(const std::vector<std::string>& extra, const std::string& html,
                     const std::string& work) {
  const std::string exe = find_in_path("chromium");
  if (exe.empty()) {
    ADD_FAILURE() << "chromium is not installed (scripts/setup.sh installs Debian's chromium)";
    return {};
  }
  ChildSpec c;
  c.argv = {exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--user-data-dir=" + work + "/profile"};
  c.argv.insert(c.argv.end(), extra.begin(), extra.end());
  c.argv.push_back("file://" + fs::absolute(html).string());
  c.env = {{"HOME", work}};
  c.stdout_path = work + "/chromium.stdout";
  c.stderr_path = work + "/chromium.stderr";
  c.timeout_s = 180;
  return run_child(c);
}

}  // namespace

std::string chromium_dom(const std::string& html_path) {
  const std::string work = fs::path(html_path).parent_path().string() + "/.chromium";
  fs::create_directories(work);
  const ChildResult r = chromium({"--dump-dom"}, html_path, work);
  if (!r.ok()) {
    ADD_FAILURE() << "chromium --dump-dom failed (" << r.describe()
                  << "): " << read_file(work + "/chromium.stderr");
    return {};
  }
  return read_file(work + "/chromium.stdout");
}

bool chromium_screenshot(const std::string& html_path, const std::string& png_path, int width,
                         int height) {
  const std::string work = fs::path(html_path).parent_path().string() + "/.chromium";
  fs::create_directories(work);
  const ChildResult r = chromium(
      {"--hide-scrollbars", "--window-size=" + std::to_string(width) + "," + std::to_string(height),
       "--screenshot=" + fs::absolute(png_path).string()},
      html_path, work);
  return r.ok() && fs::exists(png_path) && fs::file_size(png_path) > 1000;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos;
       p = text.find(needle, p + needle.size()))
    ++n;
  return n;
}

}  // namespace vkllm::test
