// Hub client without the network: model ids, cache location, offline lookup in a cache laid out
// by hand the way Python's huggingface_hub writes it. Runs in builds with and without libcurl.
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error.h"
#include "hub/hub.h"
#include "hub_fixture.h"

using namespace vkllm;
using namespace vkllm::test;

TEST(HubSpec, ParsesModelIdsAndRevisions) {
  RepoSpec a = parse_repo_spec("Qwen/Qwen3-0.6B");
  EXPECT_EQ(a.repo, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(a.revision, "main");
  RepoSpec b =
      parse_repo_spec("unsloth/Llama-3.2-1B-Instruct@5a8abab4a5d6f164389b1079fb721cfab8d7126c");
  EXPECT_EQ(b.repo, "unsloth/Llama-3.2-1B-Instruct");
  EXPECT_EQ(b.revision, "5a8abab4a5d6f164389b1079fb721cfab8d7126c");
  EXPECT_EQ(parse_repo_spec("org/name@refs/pr/1").revision, "refs/pr/1");
  for (const char* bad :
       {"", "name", "/abs/path", "org/", "/name", "a/b/c", "org/na me", "org/..", "org/-x",
        "org/x.", "org/a--b", "org/name@", "org/name@../x", "org/name@/abs", "../org/name"}) {
    EXPECT_THROW(parse_repo_spec(bad), Error) << bad;
  }
}

TEST(HubSpec, LooksLikeRepoIdUnlessALocalPathExists) {
  EXPECT_TRUE(looks_like_repo_id("microsoft/Phi-4-mini-instruct"));
  EXPECT_TRUE(looks_like_repo_id("Qwen/Qwen3-0.6B@main"));
  EXPECT_FALSE(looks_like_repo_id("./model"));
  EXPECT_FALSE(looks_like_repo_id("/tmp/model"));
  EXPECT_FALSE(looks_like_repo_id("model.vkllm"));
  TempDir tmp;
  make_dirs(tmp.path + "/org/local");
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(::chdir(tmp.path.c_str()), 0);
  bool local = looks_like_repo_id("org/local");
  bool remote = looks_like_repo_id("org/remote");
  ASSERT_EQ(::chdir(cwd), 0);
  EXPECT_FALSE(local) << "an existing directory org/local is a path, not a model id";
  EXPECT_TRUE(remote);
}

TEST(HubEnv, CacheDirFollowsHuggingFaceVariables) {
  ScopedEnv a("HF_HUB_CACHE", nullptr), b("HF_HOME", nullptr), c("XDG_CACHE_HOME", nullptr),
      d("HOME", "/home/u"), e("HF_HUB_OFFLINE", nullptr);
  EXPECT_EQ(hub_cache_dir(), "/home/u/.cache/huggingface/hub");
  {
    ScopedEnv x("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(hub_cache_dir(), "/xdg/huggingface/hub");
    ScopedEnv h("HF_HOME", "/hf/home/");
    EXPECT_EQ(hub_cache_dir(), "/hf/home//hub");
    ScopedEnv hc("HF_HUB_CACHE", "/shared/cache/");
    EXPECT_EQ(hub_cache_dir(), "/shared/cache");
    PullOptions o;
    o.cache_dir = "/explicit";
    EXPECT_EQ(hub_cache_dir(o), "/explicit");
  }
  EXPECT_FALSE(hub_offline());
  for (const char* on : {"1", "true", "YES", "On"}) {
    ScopedEnv off("HF_HUB_OFFLINE", on);
    EXPECT_TRUE(hub_offline()) << on;
  }
  ScopedEnv off("HF_HUB_OFFLINE", "0");
  EXPECT_FALSE(hub_offline());
}

namespace {

// A cache exactly as huggingface_hub lays it out (relative symlinks into blobs/, refs/main).
struct HandMadeCache {
  TempDir tmp;
  std::string cache = tmp.path + "/hub";
  std::string repo_dir = cache + "/models--org--tiny";
  std::string commit = "0123456789abcdef0123456789abcdef01234567";
  std::string snap = repo_dir + "/snapshots/" + commit;
  void add(const std::string& name, const std::string& content, const std::string& blob) {
    write_file(repo_dir + "/blobs/" + blob, content);
    make_dirs(snap);
    ASSERT_EQ(::symlink(("../../blobs/" + blob).c_str(), (snap + "/" + name).c_str()), 0);
  }
  HandMadeCache() {
    add("config.json", "{}", "aaaa");
    add("tokenizer.json", "{}", "bbbb");
    add("model.safetensors", "weights", "cccc");
    write_file(repo_dir + "/refs/main", commit);
  }
};

}  // namespace

TEST(HubOffline, ServesAPythonLayoutCacheAndNamesWhatIsMissing) {
  ScopedEnv off("HF_HUB_OFFLINE", nullptr);
  HandMadeCache c;
  PullOptions o;
  o.cache_dir = c.cache;
  o.offline = true;
  PullResult r = hub_pull("org/tiny", o);
  EXPECT_TRUE(r.offline);
  EXPECT_EQ(r.commit, c.commit);
  EXPECT_EQ(r.snapshot_dir, c.snap);
  ASSERT_EQ(r.files.size(), 3u);
  EXPECT_EQ(read_file(r.snapshot_dir + "/model.safetensors"), "weights");
  // A pinned commit needs no ref.
  EXPECT_EQ(hub_pull("org/tiny@" + c.commit, o).snapshot_dir, c.snap);
  // Never pulled: repo, revision, commit.
  try {
    hub_pull("org/other", o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("org/other@main: not in the cache"), std::string::npos)
        << e.what();
  }
  try {
    hub_pull("org/tiny@v2", o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("revision 'v2' was never pulled"), std::string::npos)
        << e.what();
  }
  try {
    hub_pull("org/tiny@ffffffffffffffffffffffffffffffffffffffff", o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("commit ffffffffffffffffffffffffffffffffffffffff is not in "
                                   "the cache"),
        std::string::npos)
        << e.what();
  }
  // A dangling link (blob removed) and an absent file are both "missing".
  ::unlink((c.repo_dir + "/blobs/bbbb").c_str());
  ::unlink((c.snap + "/config.json").c_str());
  try {
    hub_pull("org/tiny", o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("offline mode"), std::string::npos) << m;
    EXPECT_NE(m.find("missing config.json, tokenizer.json"), std::string::npos) << m;
  }
}

TEST(HubOffline, ModelDirOrPullTakesPathsAsIsAndIdsFromTheCache) {
  HandMadeCache c;
  PullOptions o;
  o.cache_dir = c.cache;
  o.offline = true;
  EXPECT_EQ(model_dir_or_pull(c.snap, o), c.snap);
  EXPECT_EQ(model_dir_or_pull("org/tiny", o), c.snap);
  EXPECT_THROW(model_dir_or_pull("org/absent", o), Error);
}

TEST(HubOffline, EnvironmentVariableTurnsItOn) {
  HandMadeCache c;
  ScopedEnv off("HF_HUB_OFFLINE", "1"), cache("HF_HUB_CACHE", c.cache.c_str());
  PullOptions o;
  o.endpoint = "http://127.0.0.1:9";  // would fail if contacted
  PullResult r = hub_pull("org/tiny", o);
  EXPECT_TRUE(r.offline);
  EXPECT_EQ(r.snapshot_dir, c.snap);
}

TEST(HubOffline, ShardedSnapshotNeedsEveryShard) {
  HandMadeCache c;
  ::unlink((c.snap + "/model.safetensors").c_str());
  c.add(
      "model.safetensors.index.json",
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})",
      "dddd");
  c.add("model-00001-of-00002.safetensors", "w1", "eeee");
  PullOptions o;
  o.cache_dir = c.cache;
  o.offline = true;
  try {
    hub_pull("org/tiny", o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing model-00002-of-00002.safetensors"),
              std::string::npos)
        << e.what();
  }
  c.add("model-00002-of-00002.safetensors", "w2", "ffff");
  PullResult r = hub_pull("org/tiny", o);
  EXPECT_EQ(r.files.size(), 5u);  // config, index, 2 shards, tokenizer
}

#ifndef VKLLM_WITH_CURL
TEST(HubNoCurl, PullSaysItWasBuiltWithoutLibcurlButOfflineWorks) {
  ScopedEnv off("HF_HUB_OFFLINE", nullptr);
  HandMadeCache c;
  PullOptions o;
  o.cache_dir = c.cache;
  try {
    hub_pull("org/tiny", o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without libcurl"), std::string::npos) << e.what();
  }
  o.offline = true;
  EXPECT_EQ(hub_pull("org/tiny", o).snapshot_dir, c.snap);
}
#endif
