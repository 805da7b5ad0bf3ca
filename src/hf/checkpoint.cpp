#include "hf/checkpoint.h"

#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/mapped_file.h"

namespace vkllm {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json_file(const std::string& path) {
  std::string text = read_text_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

SafetensorsIndex parse_safetensors_index(const json& idx, const std::string& where) {
  if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
    fail("{}: missing 'weight_map'", where);
  SafetensorsIndex out;
  std::set<std::string> seen;
  for (auto& [tname, file] : idx["weight_map"].items()) {
    if (!file.is_string()) fail("{}: weight_map entry for {} is not a string", where, tname);
    std::string f = file.get<std::string>();
    // A file beside the index: not the folder itself ("."), no path, no NUL (open() would stop
    // there).
    if (f.empty() || f == "." || f.find_first_of(std::string("/\0", 2)) != std::string::npos ||
        f.find("..") != std::string::npos)
      fail("{}: shard name '{}' is not a plain file name", where, f);
    if (seen.insert(f).second) out.shards.push_back(f);
    out.weight_map[tname] = f;
  }
  return out;
}

// Never throws (an unreadable path counts as absent; opening it later names the problem).
static bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

static std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

HfCheckpoint::HfCheckpoint(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("{}: not a directory (expected a Hugging Face model folder)", dir);
  const std::string cfg = dir + "/config.json";
  if (!exists(cfg)) fail("{}: missing config.json", dir);
  config_ = read_json_file(cfg);
  const std::string gen = dir + "/generation_config.json";
  gen_config_ = exists(gen) ? read_json_file(gen) : json();
  desc_ = parse_hf_config(config_, gen_config_, cfg);

  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (exists(index)) {
    const SafetensorsIndex idx = parse_safetensors_index(read_json_file(index), index);
    std::map<std::string, const SafetensorsFile*> by_name;
    for (auto& f : idx.shards) {
      shards_.push_back(std::make_unique<SafetensorsFile>(dir + "/" + f));
      by_name[f] = shards_.back().get();
    }
    for (auto& [tname, file] : idx.weight_map) {
      const SafetensorsFile* owner = by_name.at(file);
      auto it = owner->tensors().find(tname);
      if (it == owner->tensors().end())
        fail("{}: tensor {} is not in shard {}", index, tname, file);
      tensors_[tname] = &it->second;
    }
  } else if (exists(single)) {
    shards_.push_back(std::make_unique<SafetensorsFile>(single));
    for (auto& [tname, t] : shards_[0]->tensors()) tensors_[tname] = &t;
  } else if (exists(dir + "/pytorch_model.bin") || exists(dir + "/pytorch_model.bin.index.json")) {
    fail(
        "{}: only a pickle checkpoint (pytorch_model.bin) is present; pickle files can run code "
        "and are refused. "
        "Convert it to safetensors first",
        dir);
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
}

const TensorView& HfCheckpoint::get(const std::string& name,
                                    const std::vector<int64_t>& expect) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    fail("{}: missing tensor {} (expected shape {})", dir_, name, shape_str(expect));
  if (it->second->shape != expect)
    fail("{}: tensor {} has shape {}, expected {}", it->second->file, name,
         shape_str(it->second->shape), shape_str(expect));
  return *it->second;
}

}  // namespace vkllm
