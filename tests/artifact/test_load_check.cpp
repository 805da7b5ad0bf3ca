// The load check (src/artifact/load.h) is the one place where Model::open, `vkllm verify` and
// `vkllm export` agree on what loads (issue 19). Properties, each over real inputs:
// - every artifact of the fuzz corpora and regression files (fuzz/), and a generated set of
//   damaged artifacts (each node of the metadata and of the embedded JSON files removed, emptied
//   or given the wrong type, each embedded file cut short): when verify says the artifact loads
//   (a verify OK implies it), Model::open on the CPU backend opens it; when Model::open refuses
//   it, verify refuses it with the same message;
// - a generated set of damaged Hugging Face folders (the same damages of config.json,
//   tokenizer.json and tokenizer_config.json): whatever Model::open of the folder (what
//   `vkllm run -m <folder>` does) refuses, export refuses, with the same problem named and
//   nothing left at the output path;
// - the case of the issue: tokenizer.json {"model": {"type": "BPE", "vocab": 5}}.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "../export/tiny_ckpt.h"
#include "artifact/load.h"
#include "artifact/verify.h"
#include "artifact/writer.h"
#include "artifact_exercise.h"  // fuzz/: the layout of the fuzz inputs
#include "export/exporter.h"
#include "testutil/files.h"
#include "vkllm/vkllm.h"

using namespace vkllm;
using namespace vkllm::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

void write_bytes(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  ASSERT_TRUE(f.good()) << path;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().string());
  std::sort(v.begin(), v.end());
  return v;
}

// ---- damages of a JSON document ---------------------------------------------------------------

struct Damage {
  std::string what;  // "removed /model/vocab"
  json doc;
};

json emptied(const json& v) {
  switch (v.type()) {
    case json::value_t::string:
      return "";
    case json::value_t::object:
      return json::object();
    case json::value_t::array:
      return json::array();
    case json::value_t::boolean:
      return false;
    case json::value_t::null:
      return nullptr;
    default:
      return 0;
  }
}

json wrong_type(const json& v) {
  switch (v.type()) {
    case json::value_t::string:
      return 42;
    case json::value_t::object:
      return json::array({1});
    case json::value_t::array:
      return json::object({{"k", 1}});
    case json::value_t::boolean:
      return "true";
    case json::value_t::null:
      return 42;
    default:
      return "42";
  }
}

// Every node of `root` (all children of a container with at most 8, else its first 2) removed,
// emptied and given the wrong type; variants equal to the original are left out.
std::vector<Damage> damages_of(const json& root) {
  std::vector<Damage> out;
  std::function<void(const json::json_pointer&)> walk = [&](const json::json_pointer& p) {
    const json& node = root[p];
    if (!p.empty()) {
      json d = root;
      json& parent = d[p.parent_pointer()];
      if (parent.is_object())
        parent.erase(p.back());
      else
        parent.erase(static_cast<size_t>(std::stoul(p.back())));
      out.push_back({"removed " + p.to_string(), std::move(d)});
      for (const bool empty : {true, false}) {
        json e = root;
        e[p] = empty ? emptied(node) : wrong_type(node);
        if (e != root) out.push_back({(empty ? "emptied " : "wrong type ") + p.to_string(), e});
      }
    }
    if (!node.is_structured()) return;
    const size_t n = node.size(), take = n <= 8 ? n : 2;
    if (node.is_object()) {
      size_t k = 0;
      for (auto it = node.begin(); it != node.end() && k < take; ++it, ++k) walk(p / it.key());
    } else {
      for (size_t k = 0; k < take; ++k) walk(p / k);
    }
  };
  walk(json::json_pointer());
  return out;
}

// ---- artifacts --------------------------------------------------------------------------------

// An artifact_meta fuzz input: the metadata JSON and the data section.
struct MetaInput {
  json meta;
  std::string body;
};

MetaInput split_meta_input(const std::string& bytes) {
  const size_t z = bytes.find('\0');
  return {json::parse(bytes.substr(0, z)), bytes.substr(z + 1)};
}

std::vector<uint8_t> layout(const MetaInput& m) {
  const std::string in = m.meta.dump() + '\0' + m.body;
  return fuzz::layout_meta_input(reinterpret_cast<const uint8_t*>(in.data()), in.size());
}

// The same input with embedded file `name` replaced by `text` (appended to the data section).
MetaInput with_file(const MetaInput& m, const std::string& name, const std::string& text) {
  MetaInput d = m;
  d.body.resize(artifact::align_up(d.body.size(), artifact::kTensorAlignment));
  for (json& f : d.meta["files"])
    if (f["name"] == name) {
      f["offset"] = d.body.size();
      f["nbytes"] = text.size();
    }
  d.body += text;
  return d;
}

std::string strip_prefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

struct Tally {
  int artifacts = 0, verify_ok = 0, loads = 0, refused_by_reader = 0, refused_by_load_check = 0;
};

// Verify and Model::open of one artifact (written to `file`, so that both name it alike).
void check_artifact(const std::vector<uint8_t>& b, const std::string& file, const std::string& what,
                    Tally& t) {
  write_bytes(file, b.data(), b.size());
  std::string reader_error, load_error, open_error;
  bool ok = false, loads = false;
  try {
    ArtifactReader r(file);
    const VerifyReport rep = verify_artifact(r, {});
    ok = rep.ok;
    loads = rep.summary.at("loads").get<bool>();
    if (!loads) load_error = rep.summary.at("load_error").get<std::string>();
  } catch (const Error& e) {
    reader_error = e.what();
  }
  try {
    ModelOptions o;
    o.backend = "cpu";
    Model::open(file, o);
  } catch (const Error& e) {
    open_error = e.what();
  }
  ++t.artifacts;
  t.verify_ok += ok;
  t.loads += loads;
  t.refused_by_reader += !reader_error.empty();
  t.refused_by_load_check += !load_error.empty();
  EXPECT_TRUE(loads || !ok) << what;
  if (loads) {
    EXPECT_EQ(open_error, "") << what << ": verify says it loads";
  }
  if (!open_error.empty()) {
    EXPECT_TRUE(reader_error == open_error || load_error == strip_prefix(open_error, file + ": "))
        << what << ": Model::open: " << open_error
        << "\n verify: " << (reader_error.empty() ? load_error : reader_error);
  }
}

TEST(LoadCheck, VerifyLoadsImpliesModelOpenOverCorporaAndDamagedArtifacts) {
  TempDir dir("loadcheck");
  const std::string file = dir.path + "/a.vkllm", src = VKLLM_SOURCE_DIR "/fuzz/";
  Tally corpora, damaged;
  // The fuzz inputs as the targets read them.
  for (const char* d : {"corpus/artifact", "regressions/artifact"})
    for (const std::string& f : files_in(src + d)) {
      const std::string s = vkllm::test::read_file(f);
      std::vector<uint8_t> b(s.begin(), s.end());
      fuzz::fix_hashes(b);
      check_artifact(b, file, f, corpora);
    }
  for (const char* d : {"corpus/artifact_meta", "regressions/artifact_meta"})
    for (const std::string& f : files_in(src + d)) {
      const std::string s = vkllm::test::read_file(f);
      check_artifact(fuzz::layout_meta_input(reinterpret_cast<const uint8_t*>(s.data()), s.size()),
                     file, f, corpora);
    }
  EXPECT_EQ(corpora.artifacts, 8 + 1 + 8 + 2);
  EXPECT_GE(corpora.loads, 16) << "the seeds load";

  // Damaged artifacts made from one artifact_meta seed per architecture (their tokenizers and
  // layer layouts differ; every seed is checked undamaged above).
  std::set<std::string> archs;
  for (const std::string& f : files_in(src + "corpus/artifact_meta")) {
    const MetaInput seed = split_meta_input(vkllm::test::read_file(f));
    if (!archs.insert(seed.meta["model"]["arch"].get<std::string>()).second) continue;
    for (const Damage& d : damages_of(seed.meta))
      check_artifact(layout({d.doc, seed.body}), file, f + ": metadata " + d.what, damaged);
    for (const json& jf : seed.meta["files"]) {
      const std::string name = jf["name"];
      const std::string text =
          seed.body.substr(jf["offset"].get<size_t>(), jf["nbytes"].get<size_t>());
      check_artifact(layout(with_file(seed, name, text.substr(0, text.size() / 2))), file,
                     f + ": " + name + " cut short", damaged);
      for (const Damage& d : damages_of(json::parse(text)))
        check_artifact(layout(with_file(seed, name, d.doc.dump())), file,
                       f + ": " + name + " " + d.what, damaged);
    }
  }
  std::printf(
      "corpora: %d artifacts, %d load, %d verify OK\n"
      "damaged: %d artifacts; refused by the reader %d, by the load check %d; %d load, %d "
      "verify OK\n",
      corpora.artifacts, corpora.loads, corpora.verify_ok, damaged.artifacts,
      damaged.refused_by_reader, damaged.refused_by_load_check, damaged.loads, damaged.verify_ok);
  RecordProperty("damaged_artifacts", damaged.artifacts);
  EXPECT_EQ(archs.size(), 3u);
  EXPECT_GT(damaged.artifacts, 1000);
  EXPECT_GT(damaged.refused_by_load_check, 100);
  EXPECT_GT(damaged.refused_by_reader, 500);
  EXPECT_GT(damaged.loads, 100);  // damages the runtime tolerates (producer, recipe parameters)
}

// ---- Hugging Face folders ----------------------------------------------------------------------

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// What a message says after the path it starts with ("<path>: what"; the test's paths hold no
// ": ").
std::string problem(const std::string& msg) {
  const size_t c = msg.find(": ");
  return c == std::string::npos ? msg : msg.substr(c + 2);
}

TEST(LoadCheck, WhatModelOpenRefusesInAFolderExportRefuses) {
  TempDir dir("loadcheck-hf");
  const std::string base = make_checkpoint(dir.path + "/base", TinySpec{});
  const std::string ck = dir.path + "/ck", out = dir.path + "/m.vkllm";
  RecipeOptions ro;
  ro.recipe = "quantized-8da4w";
  ro.max_context = 32;
  int cases = 0, run_refused = 0;
  auto check = [&](const std::string& file, const std::string& text, const std::string& what) {
    fs::remove_all(ck);
    fs::copy(base, ck, fs::copy_options::recursive);
    if (text.empty())
      fs::remove(ck + "/" + file);
    else
      write_bytes(ck + "/" + file, text.data(), text.size());
    ModelOptions mo;
    mo.backend = "cpu";
    const std::string run_error = error_of([&] { Model::open(ck, mo); });
    const std::string export_error = error_of([&] { export_checkpoint(ck, out, ro); });
    ++cases;
    if (run_error.empty()) {
      fs::remove(out);
      return;
    }
    ++run_refused;
    EXPECT_NE(export_error, "") << what << ": run refuses (" << run_error << "), export does not";
    EXPECT_FALSE(fs::exists(out)) << what;
    // The same problem (run names the folder's file, export the output), or export names the
    // damaged file (its own check of the folder's JSON files and of the tokenizer's presence).
    EXPECT_TRUE(problem(export_error) == problem(run_error) ||
                export_error.find(ck + "/" + file) != std::string::npos ||
                export_error.find("no " + std::string(file)) != std::string::npos)
        << what << "\n run:    " << run_error << "\n export: " << export_error;
  };
  for (const char* file : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const std::string text = vkllm::test::read_file(base + "/" + file);
    check(file, text.substr(0, text.size() / 2), std::string(file) + " cut short");
    check(file, "", std::string(file) + " gone");
    for (const Damage& d : damages_of(json::parse(text)))
      check(file, d.doc.dump(), std::string(file) + " " + d.what);
  }
  std::printf("folders: %d damaged, %d refused by Model::open (and by export)\n", cases,
              run_refused);
  EXPECT_GT(cases, 80);
  EXPECT_GT(run_refused, 60);
}

// Found by the property above: `run -m` of a folder without tokenizer_config.json failed to open
// it ("cannot open") while export accepted it; the file is optional in all three now.
TEST(LoadCheck, AFolderWithoutTokenizerConfigOpensAndExports) {
  TempDir dir("loadcheck-nocfg");
  const std::string ck = make_checkpoint(dir.path + "/ck", TinySpec{});
  fs::remove(ck + "/tokenizer_config.json");
  ModelOptions mo;
  mo.backend = "cpu";
  EXPECT_EQ(Model::open(ck, mo)->encode("ab", false), (std::vector<int32_t>{'a', 'b'}));
  RecipeOptions ro;
  ro.recipe = "quantized-8da4w";
  ro.max_context = 32;
  export_checkpoint(ck, dir.path + "/m.vkllm", ro);
  EXPECT_EQ(Model::open(dir.path + "/m.vkllm", mo)->encode("ab", false),
            (std::vector<int32_t>{'a', 'b'}));
}

// ---- the case of issue 19 ----------------------------------------------------------------------

const char* kBadTokenizer = R"({"model": {"type": "BPE", "vocab": 5}})";

TEST(LoadCheck, ExportRefusesATokenizerThatDoesNotLoad) {
  TempDir dir("loadcheck-tok");
  const std::string ck = make_checkpoint(dir.path + "/ck", TinySpec{});
  write_bytes(ck + "/tokenizer.json", kBadTokenizer, std::strlen(kBadTokenizer));
  RecipeOptions ro;
  ro.recipe = "quantized-8da4w";
  ro.max_context = 32;
  const std::string out = dir.path + "/m.vkllm";
  EXPECT_EQ(error_of([&] { export_checkpoint(ck, out, ro); }),
            out + ": model.vocab must be a non-empty object");
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(files_in(dir.path), std::vector<std::string>{ck}) << "only the checkpoint is left";
}

// A tiny checkpoint exported (quantized-8da4w, 32 positions) to dir/name; its path.
std::string export_tiny(const TempDir& dir, const std::string& name) {
  const std::string ck = make_checkpoint(dir.path + "/ck", TinySpec{});
  RecipeOptions ro;
  ro.recipe = "quantized-8da4w";
  ro.max_context = 32;
  export_checkpoint(ck, dir.path + "/" + name, ro);
  return dir.path + "/" + name;
}

// An artifact's content, its embedded files passed through `edit` (name, bytes -> bytes), and
// its weights' bytes: what write_artifact takes to write it again.
struct Rewrite {
  ArtifactContent c;
  std::vector<std::vector<uint8_t>> w;
};
Rewrite rewrite_of(const ArtifactReader& r,
                   const std::function<std::string(const std::string&, std::string)>& edit) {
  Rewrite out;
  out.c.desc = r.desc();
  out.c.recipe = r.recipe();
  out.c.program = r.program();
  for (const std::string& n : r.file_names())
    out.c.files.push_back({n, edit(n, std::string(r.file(n)))});
  out.w.resize(out.c.program.tensors.size());
  for (size_t i = 0; i < out.w.size(); ++i)
    if (out.c.program.tensors[i].kind == TensorKind::Weight) {
      const auto s = r.weight(r.program(), static_cast<int32_t>(i));
      out.w[i].assign(s.begin(), s.end());
    }
  return out;
}

// The exported artifact embeds the tokenizer's compiled form, keyed by its tokenizer.json, and
// the runtime loads that: a damaged one with the right key is refused with the compiled form's
// error, while one keyed by another tokenizer.json is ignored (the tokenizer.json loads).
TEST(LoadCheck, TheCompiledTokenizerIsLoadedWhereItMatches) {
  TempDir dir("loadcheck-compiled");
  const std::string good = export_tiny(dir, "good.vkllm");
  ArtifactReader r(good);
  const auto names = r.file_names();
  ASSERT_NE(std::find(names.begin(), names.end(), "tokenizer.compiled"), names.end());
  auto rewrite = [&](const std::string& out, const std::string& json_tail, size_t cut) {
    Rewrite rw = rewrite_of(r, [&](const std::string& n, std::string bytes) {
      if (n == "tokenizer.json") bytes += json_tail;
      if (n == "tokenizer.compiled") bytes.resize(bytes.size() - cut);
      return bytes;
    });
    write_artifact(out, rw.c, rw.w, LoadCheck::None);
  };
  const std::string damaged = dir.path + "/damaged.vkllm", stale = dir.path + "/stale.vkllm";
  rewrite(damaged, "", 4);
  EXPECT_EQ(error_of([&] { load_artifact(ArtifactReader(damaged)); }),
            damaged + ": the compiled tokenizer ends inside a count (4 bytes wanted, 0 left)");
  rewrite(stale, "\n", 4);
  ModelOptions mo;
  mo.backend = "cpu";
  EXPECT_EQ(Model::open(stale, mo)->encode("ab", false),
            Model::open(good, mo)->encode("ab", false));
}

TEST(LoadCheck, VerifyRefusesATokenizerThatDoesNotLoad) {
  TempDir dir("loadcheck-tok2");
  const std::string good = export_tiny(dir, "good.vkllm"), bad = dir.path + "/bad.vkllm";
  ArtifactReader r(good);
  Rewrite rw = rewrite_of(r, [](const std::string& n, std::string bytes) {
    return n == "tokenizer.json" ? std::string(kBadTokenizer) : bytes;
  });
  const ArtifactContent& c = rw.c;
  const std::vector<std::vector<uint8_t>>& w = rw.w;
  // The library writer refuses it too, unless told to write a damaged artifact.
  EXPECT_EQ(error_of([&] { write_artifact(bad, c, w); }),
            bad + ": model.vocab must be a non-empty object");
  EXPECT_FALSE(fs::exists(bad));
  write_artifact(bad, c, w, LoadCheck::None);

  const VerifyReport good_rep = verify_artifact(ArtifactReader(good), {});
  EXPECT_TRUE(good_rep.ok) << good_rep.summary.dump();
  EXPECT_TRUE(good_rep.summary["loads"].get<bool>());
  const VerifyReport rep = verify_artifact(ArtifactReader(bad), {});
  EXPECT_FALSE(rep.ok);
  ASSERT_EQ(rep.reasons.size(), 1u) << rep.summary.dump();
  EXPECT_EQ(rep.reasons[0],
            "the runtime refuses to load it: model.vocab must be a non-empty object");
  EXPECT_FALSE(rep.summary["loads"].get<bool>());
  ModelOptions mo;
  mo.backend = "cpu";
  EXPECT_EQ(error_of([&] { Model::open(bad, mo); }),
            bad + ": model.vocab must be a non-empty object");
}

}  // namespace
