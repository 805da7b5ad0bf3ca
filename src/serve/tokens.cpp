#include "serve/tokens.h"

#include <fmt/format.h>

#include "serve/openai.h"

namespace vkllm::serve {

using nlohmann::json;

namespace {

json object_body(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded())
    throw HttpError(400, "the request body is not valid JSON", "", "invalid_json");
  if (!j.is_object())
    throw HttpError(400, "the request body must be a JSON object", "", "invalid_json");
  return j;
}

bool flag(const json& j, const char* name, bool dflt) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean())
    throw HttpError(400, fmt::format("'{}' must be true or false", name), name, "invalid_value");
  return it->get<bool>();
}

}  // namespace

json tokenize(const Model& model, const std::string& body) {
  const json j = object_body(body);
  auto c = j.find("content");
  if (c == j.end() || !c->is_string())
    throw HttpError(400, "'content' must be a string", "content", "invalid_value");
  if (!flag(j, "parse_special", true))
    throw HttpError(400, "'parse_special': false is not supported (special tokens' text is parsed)",
                    "parse_special", "invalid_value");
  const std::vector<int32_t> ids =
      model.encode(c->get<std::string>(), flag(j, "add_special", false));
  json tokens = json::array();
  if (flag(j, "with_pieces", false)) {
    for (int32_t id : ids) tokens.push_back({{"id", id}, {"piece", model.decode({id})}});
  } else {
    tokens = ids;
  }
  return {{"tokens", tokens}};
}

json detokenize(const Model& model, const std::string& body) {
  const json j = object_body(body);
  auto t = j.find("tokens");
  if (t == j.end() || !t->is_array())
    throw HttpError(400, "'tokens' must be an array of token ids", "tokens", "invalid_value");
  const int64_t vocab = model.info().vocab_size;
  std::vector<int32_t> ids;
  ids.reserve(t->size());
  for (size_t i = 0; i < t->size(); ++i) {
    const json& v = (*t)[i];
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() >= static_cast<uint64_t>(vocab)) ||
        v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
      throw HttpError(
          400,
          fmt::format("'tokens[{}]' is {}; token ids are integers in [0, {})", i, v.dump(), vocab),
          "tokens", "invalid_value");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return {{"content", model.decode(ids)}};
}

}  // namespace vkllm::serve
