// LoRA adapters through the loopback fake hub (docs/lora.md): `export --lora org/adapter` with no
// base pulls the adapter (adapter_config.json + adapter_model.safetensors) and then the base its
// config names, merges, and records the adapter's commit and hashes in the artifact.
#ifdef VKLLM_WITH_CURL
#include <gtest/gtest.h>

#include <filesystem>

#include "artifact/reader.h"
#include "core/error.h"
#include "export/exporter.h"
#include "export/lora.h"
#include "export/lora_fixture.h"
#include "export/tiny_ckpt.h"
#include "hub/hub.h"
#include "hub_fixture.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;
using namespace vkllm::test;

namespace {

struct AdapterHubTest : ::testing::Test {
  TempDir tmp;
  std::string root = tmp.path + "/repos";
  ScopedEnv no_token{"HF_TOKEN", nullptr}, no_offline{"HF_HUB_OFFLINE", nullptr},
      home{"HF_HOME", (tmp.path + "/hf-home").c_str()}, no_cache{"HF_HUB_CACHE", nullptr};

  PullOptions opts(const FakeHub& hub) const {
    PullOptions o;
    o.endpoint = hub.endpoint();
    o.cache_dir = tmp.path + "/cache";
    o.progress = false;
    o.retry_base_ms = 10;
    return o;
  }
  // org/base (a small Llama checkpoint) and org/adapter (q_proj of both layers) naming it.
  void make_repos() {
    vkllm::testing::TinySpec s;
    vkllm::testing::make_checkpoint(root + "/org/base", s);
    nlohmann::ordered_json cfg = vkllm::testing::test_lora_config(4, 8, {"q_proj"});
    cfg["base_model_name_or_path"] = "org/base";
    std::vector<vkllm::testing::TestLoraModule> mods;
    for (int l = 0; l < s.layers; ++l) {
      vkllm::testing::TestLoraModule m;
      m.module = "model.layers." + std::to_string(l) + ".self_attn.q_proj";
      m.out = int64_t(s.heads) * s.head_dim;
      m.in = s.hidden;
      m.r = 4;
      mods.push_back(m);
    }
    vkllm::testing::write_test_adapter(root + "/org/adapter", cfg, mods, 9);
  }
};

}  // namespace

TEST_F(AdapterHubTest, ExportWithoutBasePullsTheAdapterAndItsBase) {
  make_repos();
  FakeHub hub(root, nlohmann::json::object(), tmp.path);
  const PullOptions po = opts(hub);
  const LoraSource src = resolve_lora_source("org/adapter", po);
  EXPECT_EQ(src.prov.repo, "org/adapter");
  EXPECT_EQ(src.prov.commit, hub.commit("org/adapter"));
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    EXPECT_EQ(read_file(src.dir + "/" + f), read_file(root + "/org/adapter/" + f)) << f;
  const std::string base = lora_base_of(src.dir);
  EXPECT_EQ(base, "org/base");
  const std::string base_dir = model_dir_or_pull(base, po);
  auto merge = open_lora_merge(src, base_dir, 0.5);
  EXPECT_EQ(merge->deltas().size(), 2u);
  RecipeOptions ro;
  ro.recipe = "quantized-8da4w";
  ro.max_context = 64;
  export_checkpoint(base_dir, tmp.path + "/m.vkllm", ro, {}, int64_t(8) << 20, merge.get());
  ArtifactReader art(tmp.path + "/m.vkllm");
  const auto& lora = art.metadata()["producer"]["lora"];
  EXPECT_EQ(lora["source"], "org/adapter");
  EXPECT_EQ(lora["commit"], hub.commit("org/adapter"));
  EXPECT_EQ(lora["scale"], 0.5);
  EXPECT_EQ(lora["sha256"]["adapter_model.safetensors"],
            testutil::sha256_file_hex(root + "/org/adapter/adapter_model.safetensors"));
  // Served from the cache afterwards.
  PullOptions off = po;
  off.offline = true;
  EXPECT_EQ(resolve_lora_source("org/adapter", off).dir, src.dir);
}

TEST_F(AdapterHubTest, PickleOnlyAdapterRepoIsRefused) {
  make_repos();
  std::filesystem::rename(root + "/org/adapter/adapter_model.safetensors",
                          root + "/org/adapter/adapter_model.bin");
  FakeHub hub(root, nlohmann::json::object(), tmp.path);
  try {
    resolve_lora_source("org/adapter", opts(hub));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the adapter is only a pickle file (adapter_model.bin)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(hub.count("GET", "adapter_model.bin"), 0);  // nothing of it was downloaded
}
#endif
