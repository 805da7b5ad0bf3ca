// The chat-template interpreter against @huggingface/jinja: tools/fixtures/render_templates.mjs
// renders real chat templates (Qwen3, Llama 3.2, Llama 3, Phi-4-mini, Gemma 3, DeepSeek-V3) over a
// table of conversations and variants, and one small template per construct of the language
// (tests/template/language.json); every rendering here must equal the oracle's byte for byte, and
// where the oracle fails (raise_exception, type errors) ours must fail too, with the same message
// for raise_exception.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "template/template.h"

namespace vkllm {
namespace {

using nlohmann::ordered_json;

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs the oracle script into a scratch file; a failure (not a skip) when node or the fixtures
// are missing.
ordered_json run_oracle() {
  const std::string src = VKLLM_SOURCE_DIR;
  const std::string fixtures = src + "/.fixtures";
  if (!std::filesystem::exists(fixtures + "/qwen3/tokenizer_config.json")) {
    ADD_FAILURE() << "tokenizer fixtures missing: run `tools/fixtures/make_fixtures.sh .fixtures` "
                     "in the repository root (scripts/setup.sh does)";
    return {};
  }
  const std::string out =
      std::string(VKLLM_BINARY_DIR) + "/template_oracle." + std::to_string(::getpid()) + ".json";
  const std::string cmd = "node " + shell_quote(src + "/tools/fixtures/render_templates.mjs") +
                          " " + shell_quote(fixtures) + " " + shell_quote(src) + " " +
                          shell_quote(out) + " 2>&1";
  std::string log;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "cannot run " << cmd;
    return {};
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) log.append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0) {
    ADD_FAILURE() << "the oracle failed (exit " << rc << "): " << cmd << "\n" << log;
    return {};
  }
  std::ifstream f(out);
  ordered_json j = ordered_json::parse(f);
  std::filesystem::remove(out);
  return j;
}

TEST(TemplateOracle, RenderingsEqualHuggingFaceJinja) {
  const ordered_json oracle = run_oracle();
  ASSERT_TRUE(oracle.contains("cases"));
  std::map<std::string, tmpl::Template> parsed;
  for (const auto& [name, text] : oracle.at("templates").items()) {
    try {
      parsed.emplace(name, tmpl::Template::parse(text.get<std::string>()));
    } catch (const tmpl::TemplateError&) {
      // Templates the oracle cannot parse either are checked case by case below.
    }
  }
  std::map<std::string, int> rendered;  // successful renderings per real template
  size_t checked = 0, mismatches = 0;
  for (const auto& c : oracle.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string tname = c.at("template").get<std::string>();
    std::string got, err;
    bool raised = false;
    std::string raised_msg;
    try {
      auto it = parsed.find(tname);
      if (it == parsed.end())
        tmpl::Template::parse(oracle.at("templates").at(tname).get<std::string>());  // throws
      got = it->second.render(c.at("context"));
    } catch (const tmpl::TemplateError& e) {
      err = e.what();
      raised = e.raised();
      raised_msg = e.message();
    }
    ++checked;
    if (c.contains("expected")) {
      const std::string want = c.at("expected").get<std::string>();
      if (!err.empty() || got != want) {
        if (++mismatches <= 10)
          ADD_FAILURE() << name << ": rendering differs\n--- ours"
                        << (err.empty() ? "" : " (" + err + ")") << ":\n"
                        << got << "\n--- @huggingface/jinja:\n"
                        << want;
        continue;
      }
      if (tname.rfind("language: ", 0) != 0) ++rendered[tname];
    } else {
      const std::string want = c.at("error").get<std::string>();
      if (err.empty()) {
        if (++mismatches <= 10)
          ADD_FAILURE() << name << ": @huggingface/jinja fails (" << want
                        << ") but ours rendered:\n"
                        << got;
      } else if (raised && raised_msg != want) {
        if (++mismatches <= 10)
          ADD_FAILURE() << name << ": raise_exception message differs: ours '" << raised_msg
                        << "', @huggingface/jinja '" << want << "'";
      }
      EXPECT_EQ(err.find('\n'), std::string::npos) << name << ": error not on one line: " << err;
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << checked << " cases";
  EXPECT_GE(checked, 300u);
  // Each real template renders most of the table (the rest are the template's own refusals).
  for (const char* t : {"qwen3", "llama3.2", "llama3", "phi4mini", "gemma3", "deepseek_v3"})
    EXPECT_GE(rendered[t], 18) << t << ": too few successful renderings to mean anything";
}

}  // namespace
}  // namespace vkllm
