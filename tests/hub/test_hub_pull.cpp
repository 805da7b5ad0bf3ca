// Pulls against the loopback fake hub (tests/hub/fake_hub.py): real HTTP, real cache, real locks.
// Expected hashes and commits come from the fake hub's manifest (Python's hashlib), contents are
// compared byte for byte with the source repo.
#ifdef VKLLM_WITH_CURL
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>

#include "core/error.h"
#include "hf/safetensors.h"
#include "hub/hub.h"
#include "hub_fixture.h"

using namespace vkllm;
using namespace vkllm::test;

namespace {

const std::vector<std::string> kFiles = {"config.json", "generation_config.json", "tokenizer.json",
                                         "tokenizer_config.json", "model.safetensors"};

struct HubTest : ::testing::Test {
  TempDir tmp;
  std::string root = tmp.path + "/repos";
  std::string cache = tmp.path + "/cache";
  ScopedEnv no_token{"HF_TOKEN", nullptr}, no_offline{"HF_HUB_OFFLINE", nullptr},
      home{"HF_HOME", (tmp.path + "/hf-home").c_str()}, no_cache{"HF_HUB_CACHE", nullptr};

  PullOptions opts(const FakeHub& hub) const {
    PullOptions o;
    o.endpoint = hub.endpoint();
    o.cache_dir = cache;
    o.progress = false;
    o.retry_base_ms = 10;
    o.max_retries = 3;
    return o;
  }
  std::string repo_dir(const std::string& repo = "org/tiny") const {
    std::string f = repo;
    f.replace(f.find('/'), 1, "--");
    return cache + "/models--" + f;
  }
  // The snapshot holds every file as a relative link to the blob named by the hub's hash, with
  // the source bytes.
  void expect_snapshot(const FakeHub& hub, const PullResult& r, const std::string& rev,
                       const std::string& dir_name, const std::vector<std::string>& files) {
    std::string commit = hub.commit("org/tiny", rev);
    EXPECT_EQ(r.commit, commit);
    EXPECT_EQ(r.snapshot_dir, repo_dir() + "/snapshots/" + commit);
    for (const auto& f : files) {
      std::string link = r.snapshot_dir + "/" + f;
      EXPECT_EQ(read_link(link), "../../blobs/" + hub.oid("org/tiny", rev, f)) << f;
      EXPECT_EQ(read_file(link), read_file(root + "/org/" + dir_name + "/" + f)) << f;
    }
  }
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

}  // namespace

TEST_F(HubTest, HappyPathThenNothingToDownload) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {}, tmp.path);
  PullResult r = hub_pull("org/tiny", opts(hub));
  expect_snapshot(hub, r, "main", "tiny", kFiles);
  EXPECT_EQ(read_file(repo_dir() + "/refs/main"), hub.commit("org/tiny"));
  ASSERT_EQ(r.files.size(), kFiles.size());
  for (const auto& f : r.files) EXPECT_TRUE(f.downloaded) << f.name;
  SafetensorsFile st(r.snapshot_dir + "/model.safetensors");  // usable as a checkpoint file
  EXPECT_EQ(st.tensors().size(), 2u);
  // The LFS file came through the 302 to the blob URL; nothing is left half-written.
  EXPECT_EQ(hub.count("HEAD", "/resolve/" + r.commit + "/model.safetensors", 302), 1);
  EXPECT_EQ(hub.count("GET", "/_blobs/" + hub.oid("org/tiny", "main", "model.safetensors"), 200),
            1);
  for (const auto& p : list_tree(cache)) EXPECT_EQ(p.find(".incomplete"), std::string::npos) << p;

  int gets_before = hub.count("GET", "/");
  PullResult again = hub_pull("org/tiny", opts(hub));
  EXPECT_EQ(again.snapshot_dir, r.snapshot_dir);
  for (const auto& f : again.files) EXPECT_FALSE(f.downloaded) << f.name;
  EXPECT_EQ(hub.count("GET", "/") - gets_before, 1);  // only the model info
}

TEST_F(HubTest, ShardedCheckpointFetchesTheIndexAndEveryShard) {
  make_repo(root, "org/tiny", {.shards = 3});
  FakeHub hub(root, {}, tmp.path);
  PullResult r = hub_pull("org/tiny", opts(hub));
  std::vector<std::string> files = {"config.json",
                                    "model.safetensors.index.json",
                                    "model-00001-of-00003.safetensors",
                                    "model-00002-of-00003.safetensors",
                                    "model-00003-of-00003.safetensors",
                                    "tokenizer.json"};
  expect_snapshot(hub, r, "main", "tiny", files);
  EXPECT_EQ(r.files.size(), 8u);  // + generation_config, tokenizer_config
}

TEST_F(HubTest, PinnedRevisionAndCommit) {
  make_repo(root, "org/tiny", {.config_note = "main"});
  make_repo(root, "org/tiny@v1", {.config_note = "v1"});  // same weights, other config
  FakeHub hub(root, {}, tmp.path);
  std::string c_main = hub.commit("org/tiny"), c_v1 = hub.commit("org/tiny", "v1");
  ASSERT_NE(c_main, c_v1);

  PullResult v1 = hub_pull("org/tiny@v1", opts(hub));
  expect_snapshot(hub, v1, "v1", "tiny@v1", kFiles);
  EXPECT_EQ(read_file(repo_dir() + "/refs/v1"), c_v1);
  EXPECT_FALSE(exists(repo_dir() + "/refs/main"));

  PullResult by_commit = hub_pull("org/tiny@" + c_v1, opts(hub));
  EXPECT_EQ(by_commit.snapshot_dir, v1.snapshot_dir);
  EXPECT_FALSE(exists(repo_dir() + "/refs/" + c_v1));  // commits get no ref, as in Python

  PullResult m = hub_pull("org/tiny", opts(hub));
  expect_snapshot(hub, m, "main", "tiny", kFiles);
  EXPECT_NE(read_file(m.snapshot_dir + "/config.json"),
            read_file(v1.snapshot_dir + "/config.json"));
  // The identical weights are one blob shared by both snapshots, downloaded once.
  EXPECT_EQ(read_link(m.snapshot_dir + "/model.safetensors"),
            read_link(v1.snapshot_dir + "/model.safetensors"));
  EXPECT_EQ(hub.count("GET", "/_blobs/"), 1);
}

TEST_F(HubTest, UnknownRepoAndRevisionSay404) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {}, tmp.path);
  std::string e = error_of([&] { hub_pull("org/nope", opts(hub)); });
  EXPECT_HAS(e, "org/nope: repository not found");
  EXPECT_HAS(e, "HTTP 404");
  e = error_of([&] { hub_pull("org/tiny@nope", opts(hub)); });
  EXPECT_HAS(e, "revision 'nope' not found");
  EXPECT_FALSE(exists(cache));  // nothing written for a failed resolve
}

TEST_F(HubTest, GatedRepoNeedsAToken) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {{"gated", {{"org/tiny", "hf_secret"}}}}, tmp.path);
  std::string e = error_of([&] { hub_pull("org/tiny", opts(hub)); });
  EXPECT_HAS(e, "org/tiny: gated or private repository (HTTP 401)");
  EXPECT_HAS(e, "HF_TOKEN");
  PullOptions wrong = opts(hub);
  wrong.token = "hf_wrong";
  e = error_of([&] { hub_pull("org/tiny", wrong); });
  EXPECT_HAS(e, "access denied (HTTP 403)");
  // The token file under HF_HOME, as `huggingface-cli login` writes it.
  write_file(tmp.path + "/hf-home/token", "hf_secret\n");
  PullResult r = hub_pull("org/tiny", opts(hub));
  expect_snapshot(hub, r, "main", "tiny", kFiles);
  // HF_TOKEN wins over the file (in a fresh cache: a cached snapshot needs no file request).
  ScopedEnv env_token("HF_TOKEN", "hf_wrong");
  cache = tmp.path + "/cache2";
  e = error_of([&] { hub_pull("org/tiny", opts(hub)); });
  EXPECT_HAS(e, "HTTP 403");
}

TEST_F(HubTest, ServerErrorsAreRetriedThenSucceed) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {{"fail_500", {{"model.safetensors", 2}, {"config.json", 1}}}}, tmp.path);
  PullResult r = hub_pull("org/tiny", opts(hub));
  expect_snapshot(hub, r, "main", "tiny", kFiles);
  EXPECT_EQ(hub.count("GET", "/_blobs/", 500), 2);
  EXPECT_EQ(hub.count("GET", "/_blobs/", 200), 1);
  EXPECT_EQ(hub.count("GET", "/config.json", 500), 1);
}

TEST_F(HubTest, PersistentServerErrorGivesUpBoundedAndLinksNothing) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {{"fail_500", {{"model.safetensors", 100}}}}, tmp.path);
  PullOptions o = opts(hub);
  o.max_retries = 2;
  std::string e = error_of([&] { hub_pull("org/tiny", o); });
  EXPECT_HAS(e, "HTTP 500");
  EXPECT_HAS(e, "gave up after 3 attempts");
  EXPECT_EQ(hub.count("GET", "/_blobs/", 500), 3);
  EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + hub.commit("org/tiny") + "/model.safetensors"));
  EXPECT_FALSE(exists(repo_dir() + "/blobs/" + hub.oid("org/tiny", "main", "model.safetensors")));
}

TEST_F(HubTest, CutTransferResumesWithRange) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {{"cut", {{"model.safetensors", 1}}}}, tmp.path);
  PullResult r = hub_pull("org/tiny", opts(hub));
  expect_snapshot(hub, r, "main", "tiny", kFiles);
  auto log = hub.log();
  std::vector<nlohmann::json> blob_gets;
  for (const auto& l : log)
    if (l["method"] == "GET" && l["path"].get<std::string>().find("/_blobs/") != std::string::npos)
      blob_gets.push_back(l);
  ASSERT_EQ(blob_gets.size(), 2u);
  EXPECT_TRUE(blob_gets[0]["range"].is_null());
  uint64_t size = hub.manifest()["org/tiny"]["main"]["files"]["model.safetensors"]["size"];
  EXPECT_EQ(blob_gets[1]["range"], fmt::format("bytes={}-", size / 2));
  EXPECT_EQ(blob_gets[1]["status"], 206);
}

TEST_F(HubTest, StalledTransferTimesOutAndResumes) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {{"stall", {{"model.safetensors", 1}}}, {"stall_seconds", 8}}, tmp.path);
  PullOptions o = opts(hub);
  o.stall_timeout_s = 1;  // the transfer goes silent after half: abort after 1 s, then resume
  auto t0 = std::chrono::steady_clock::now();
  PullResult r = hub_pull("org/tiny", o);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_snapshot(hub, r, "main", "tiny", kFiles);
  uint64_t size = hub.manifest()["org/tiny"]["main"]["files"]["model.safetensors"]["size"];
  EXPECT_EQ(hub.count("GET", "/_blobs/", 200), 1);
  EXPECT_EQ(hub.count("GET", "/_blobs/", 206), 1);
  bool resumed = false;
  for (const auto& l : hub.log())
    if (l["status"] == 206 && l["range"] == fmt::format("bytes={}-", size / 2)) resumed = true;
  EXPECT_TRUE(resumed);
  EXPECT_LT(secs, 6.0) << "waited for the server instead of giving up on the stalled transfer";
}

TEST_F(HubTest, CutTransferKeptAcrossPullsAndResumed) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {{"cut", {{"model.safetensors", 1}}}}, tmp.path);
  PullOptions o = opts(hub);
  o.max_retries = 0;
  std::string oid = hub.oid("org/tiny", "main", "model.safetensors");
  std::string part = repo_dir() + "/blobs/" + oid + ".incomplete";
  std::string e = error_of([&] { hub_pull("org/tiny", o); });
  EXPECT_HAS(e, "kept for the next pull");
  uint64_t size = hub.manifest()["org/tiny"]["main"]["files"]["model.safetensors"]["size"];
  EXPECT_EQ(read_file(part).size(), size / 2);
  EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + hub.commit("org/tiny") + "/model.safetensors"));
  PullResult r = hub_pull("org/tiny", o);  // a new pull, as a new process would
  expect_snapshot(hub, r, "main", "tiny", kFiles);
  EXPECT_EQ(hub.count("GET", "/_blobs/", 206), 1);
  EXPECT_FALSE(exists(part));
}

TEST_F(HubTest, WrongHashDeletesAndLinksNothing) {
  make_repo(root, "org/tiny");
  for (const std::string bad : {"model.safetensors", "config.json"}) {  // sha256 and git sha1
    TempDir work;
    cache = work.path + "/cache";
    FakeHub hub(root, {{"corrupt", {bad}}}, tmp.path);
    std::string e = error_of([&] { hub_pull("org/tiny", opts(hub)); });
    EXPECT_HAS(e, "org/tiny/" + bad + ": checksum mismatch");
    EXPECT_HAS(e, hub.oid("org/tiny", "main", bad));
    std::string blob = repo_dir() + "/blobs/" + hub.oid("org/tiny", "main", bad);
    EXPECT_FALSE(exists(blob));
    EXPECT_FALSE(exists(blob + ".incomplete"));
    EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + hub.commit("org/tiny") + "/" + bad));
  }
}

TEST_F(HubTest, PathTraversalFileNamesAreRefused) {
  make_repo(root, "org/tiny", {.shards = 2, .extra_index_files = {"../../../evil.safetensors"}});
  make_repo(root, "org/abs");
  FakeHub hub(root, {{"extra_siblings", {{"org/abs", {"/etc/evil"}}}}}, tmp.path);
  std::string e = error_of([&] { hub_pull("org/tiny", opts(hub)); });
  EXPECT_HAS(e, "unsafe file name '../../../evil.safetensors'");
  e = error_of([&] { hub_pull("org/abs", opts(hub)); });
  EXPECT_HAS(e, "unsafe file name '/etc/evil'");
  for (const auto& p : list_tree(tmp.path)) EXPECT_EQ(p.find("evil"), std::string::npos) << p;
}

TEST_F(HubTest, OfflineServesWhatWasPulled) {
  make_repo(root, "org/tiny");
  PullResult online;
  {
    FakeHub hub(root, {}, tmp.path);
    online = hub_pull("org/tiny", opts(hub));
  }  // the hub is gone now
  PullOptions o;
  o.cache_dir = cache;
  o.endpoint = "http://127.0.0.1:9";
  o.offline = true;
  PullResult r = hub_pull("org/tiny", o);
  EXPECT_TRUE(r.offline);
  EXPECT_EQ(r.snapshot_dir, online.snapshot_dir);
  EXPECT_EQ(r.files.size(), kFiles.size());
  std::string e = error_of([&] { hub_pull("org/tiny@v9", o); });
  EXPECT_HAS(e, "offline mode: org/tiny@v9: revision 'v9' was never pulled");
  ::unlink((r.snapshot_dir + "/tokenizer.json").c_str());
  e = error_of([&] { hub_pull("org/tiny", o); });
  EXPECT_HAS(e, "missing tokenizer.json");
}

// Both ways of making the cache really unwritable for a root process are tried; whichever the
// sandbox allows must behave, and at least one must be available.
const Unwritable kWays[] = {Unwritable::kBindMount, Unwritable::kDropUid};

TEST_F(HubTest, ReadOnlyCacheFailsWithOneLineNamingHfHubCache) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {}, tmp.path);
  make_dirs(cache);
  PullOptions o = opts(hub);
  int used = 0;
  for (Unwritable how : kWays) {
    RestrictedResult rr = run_with_unwritable_dir(
        cache, [&] { return hub_pull("org/tiny", o).commit; }, how);
    std::cout << "[ read-only cache made by: " << rr.mechanism << " ]\n";
    if (rr.mechanism == "unavailable") continue;
    ++used;
    EXPECT_FALSE(rr.ok) << rr.text;
    EXPECT_HAS(rr.text, cache + ": the Hugging Face cache is not writable");
    EXPECT_HAS(rr.text, "set HF_HUB_CACHE to a writable directory");
    EXPECT_EQ(rr.text.find('\n'), std::string::npos) << "one line";
    EXPECT_TRUE(list_tree(cache).empty());
    EXPECT_EQ(hub.count("GET", "/_blobs/"), 0);  // detected before any download
  }
  EXPECT_GE(used, 1) << "no way to make a directory unwritable for this process";
}

TEST_F(HubTest, ReadOnlyCacheWithTheSnapshotStillServesIt) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {}, tmp.path);
  PullOptions o = opts(hub);
  std::string dir = hub_pull("org/tiny", o).snapshot_dir;
  auto before = list_tree(cache);
  int used = 0;
  for (Unwritable how : kWays) {
    RestrictedResult rr = run_with_unwritable_dir(
        cache,
        [&] {
          PullResult r = hub_pull("org/tiny", o);
          for (const auto& f : r.files)
            if (f.downloaded) return "downloaded " + f.name;
          return r.snapshot_dir;
        },
        how);
    std::cout << "[ read-only cache made by: " << rr.mechanism << " ]\n";
    if (rr.mechanism == "unavailable") continue;
    ++used;
    EXPECT_TRUE(rr.ok) << rr.text;
    EXPECT_EQ(rr.text, dir);
    EXPECT_EQ(list_tree(cache), before);
  }
  EXPECT_GE(used, 1) << "no way to make a directory unwritable for this process";
}

TEST_F(HubTest, ConcurrentPullsFromThreeProcessesShareOneDownload) {
  make_repo(root, "org/tiny", {.kib = 512});
  // ~0.5 s per copy of the weights, so the processes overlap and two must wait on the lock.
  FakeHub hub(root, {{"throttle_bps", 1 << 20}}, tmp.path);
  std::map<std::string, std::string> env = {{"HF_HUB_CACHE", cache},
                                            {"HF_ENDPOINT", hub.endpoint()}};
  std::vector<std::string> argv = {VKLLM_EXE, "pull", "org/tiny", "--json"};
  auto res = run_processes({argv, argv, argv}, env, 60);
  int downloaded = 0;
  for (const auto& p : res) {
    ASSERT_EQ(p.status, 0) << p.err;
    auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["commit"], hub.commit("org/tiny"));
    for (const auto& f : j["files"])
      if (f["name"] == "model.safetensors" && f["downloaded"].get<bool>()) ++downloaded;
  }
  EXPECT_EQ(downloaded, 1);
  EXPECT_EQ(hub.count("GET", "/_blobs/"), 1);
  EXPECT_EQ(hub.count("GET", "/api/models/org/tiny"), 3);
  PullOptions o = opts(hub);
  o.offline = true;
  expect_snapshot(hub, hub_pull("org/tiny", o), "main", "tiny", kFiles);
  for (const auto& p : list_tree(cache)) {
    EXPECT_EQ(p.find(".incomplete"), std::string::npos) << p;
    EXPECT_EQ(p.find(".tmp-"), std::string::npos) << p;
  }
}

TEST_F(HubTest, CliReportsErrorsInOneLine) {
  make_repo(root, "org/tiny");
  FakeHub hub(root, {}, tmp.path);
  std::map<std::string, std::string> env = {{"HF_HUB_CACHE", cache},
                                            {"HF_ENDPOINT", hub.endpoint()}};
  auto ok = run_process({VKLLM_EXE, "pull", "org/tiny", "-q"}, env);
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(ok.out, repo_dir() + "/snapshots/" + hub.commit("org/tiny") + "\n");
  auto bad = run_process({VKLLM_EXE, "pull", "org/nope"}, env);
  EXPECT_EQ(bad.status, 1);
  EXPECT_HAS(bad.err, "vkllm: org/nope: repository not found");
  EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1);
  auto spec = run_process({VKLLM_EXE, "pull", "not-a-model-id"}, env);
  EXPECT_EQ(spec.status, 1);
  EXPECT_HAS(spec.err, "not a Hugging Face model id");
  auto off = run_process({VKLLM_EXE, "pull", "org/tiny", "--offline", "--json"},
                         {{"HF_HUB_CACHE", cache}, {"HF_ENDPOINT", "http://127.0.0.1:9"}});
  EXPECT_EQ(off.status, 0) << off.err;
  EXPECT_EQ(nlohmann::json::parse(off.out)["offline"], true);
}

#endif  // VKLLM_WITH_CURL
