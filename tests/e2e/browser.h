// Debian's chromium, headless, as the real browser that loads report.html in the tests.
#pragma once
#include <string>

namespace vkllm::test {

// The DOM after the page's scripts ran (chromium --headless --dump-dom). Fails the calling test
// (gtest ADD_FAILURE) and returns "" when chromium is missing or fails.
std::string chromium_dom(const std::string& html_path);

// Writes a PNG screenshot of the page (width x height) to png_path; false on failure.
bool chromium_screenshot(const std::string& html_path, const std::string& png_path, int width,
                         int height);

// Occurrences of needle in text.
size_t count_of(const std::string& text, const std::string& needle);

}  // namespace vkllm::test
