// vkllm public API: open a model, create sessions, generate with a per-token callback.
//
// This header is the whole interface of the installed library (find_package(vkllm), target
// vkllm::vkllm; docs/library.md). It includes only the C++ standard library: no Vulkan, JSON or
// internal headers leak through. Classes hold their state behind a pointer, so the library's
// internals change without changing these layouts.
//
// Errors: every failure a user can act on (a missing or damaged file, a bad argument, no Vulkan
// device, a prompt that does not fit the context) throws vkllm::Error with a one-line message that
// names the thing at fault.
//
// Threads: a Model may be shared by sessions on several threads. encode, decode and chat_prompt
// run concurrently; sessions of one model take turns on its device (their calls are serialized).
// One Session must not be used by two threads at once.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__GNUC__)
#define VKLLM_API __attribute__((visibility("default")))
#else
#define VKLLM_API
#endif

namespace vkllm {

// The library's version, "MAJOR.MINOR.PATCH" (the package version of vkllmConfigVersion.cmake).
VKLLM_API const char* version();

class VKLLM_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg);
  ~Error() override;
};

struct ModelOptions {
  std::string backend = "vulkan";  // "vulkan" or "cpu" (the reference interpreter)
  // Vulkan device: index or case-insensitive name substring (`vkllm devices` lists them). Empty:
  // $VKLLM_DEVICE, else the first discrete GPU, else integrated, else any. No match: Error.
  std::string device;
  // KV cache rows (the most tokens a session holds). 0: the artifact's maximum (a Hugging Face
  // folder: its max_position_embeddings, at most 4096). Larger than the artifact's: Error.
  int context_length = 0;
};

struct ModelInfo {
  std::string architecture;  // "llama", "qwen3", "phi3"
  std::string recipe;        // the export recipe; "non-quantized" for a Hugging Face folder
  std::string backend;       // "vulkan" or "cpu"
  std::string device_name;   // the Vulkan device's name, or "cpu"
  int vocab_size = 0;
  int context_length = 0;  // in effect (ModelOptions::context_length or the maximum)
  std::vector<int32_t> eos_ids;
  uint64_t weight_bytes = 0;
  // The KV cache of one session at context_length (sliding-window layers: their rings).
  uint64_t kv_cache_bytes = 0;
  // How chat prompts are rendered: "the checkpoint's chat template (Jinja)", "native qwen3
  // format", ... (docs/tokenizer.md, "Which renderer").
  std::string chat_template;
};

// A function call made by an assistant turn: arguments is a JSON object's text.
struct ChatToolCall {
  std::string id, name, arguments;
};

// One turn of a conversation; role: "system", "user", "assistant" or "tool" (a tool's result).
struct ChatTurn {
  std::string role, content;
  std::vector<ChatToolCall> tool_calls{};  // assistant: the calls it made (after its content)
  std::string tool_call_id{};              // tool: the id of the call this result answers
};

// An opened model: a .vkllm artifact, or a Hugging Face model folder (lowered in fp32). Opening
// loads the weights onto the chosen backend once (on Vulkan: uploads them to the device); every
// session on the model shares them.
class VKLLM_API Model {
 public:
  static std::shared_ptr<Model> open(const std::string& path, const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelInfo& info() const;
  // Text to token ids with the model's tokenizer; add_special adds what its post-processor adds
  // (Llama: <|begin_of_text|>). Any bytes are accepted (invalid UTF-8 becomes U+FFFD).
  std::vector<int32_t> encode(const std::string& text, bool add_special = false) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // The model's chat format for one user turn (or a whole conversation), with the assistant
  // prompt appended: the text to generate from. Rendered by the checkpoint's own chat template,
  // or a native format for Llama 3 and Phi-4-mini (ModelInfo::chat_template says which).
  std::string chat_prompt(const std::string& user_message) const;
  std::string chat_prompt(const std::vector<ChatTurn>& conversation) const;
  // Same with tools offered to the model: `tools_json` is a JSON array of OpenAI tool objects
  // ({"type": "function", "function": {"name", "description", "parameters"}}), rendered in the
  // model's own format (docs/serve.md); empty: none. A Llama 3 model then renders the Llama 3.2
  // template (dated 26 Jul 2024, its default). Invalid JSON or a turn the format refuses: Error.
  std::string chat_prompt(const std::vector<ChatTurn>& conversation,
                          const std::string& tools_json) const;

 private:
  friend class Session;
  friend class Engine;
  friend struct ModelAccess;  // the library's own tools (runtime/model_impl.h)
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A constraint on the reply's text (structured output): made once, shared by any number of
// generate calls and threads. Opaque; made by the functions below.
class Constraint;

// Replies that are JSON texts a JSON schema accepts (the supported subset: docs/serve.md).
// schema_json: the schema's text. Throws Error naming the keyword for a schema outside the subset.
VKLLM_API std::shared_ptr<const Constraint> json_schema_constraint(const std::string& schema_json);
// Replies that are JSON objects (any properties).
VKLLM_API std::shared_ptr<const Constraint> json_object_constraint();

struct GenerationOptions {
  int max_new_tokens = 128;
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  uint64_t seed = 0;        // sampling is deterministic for a seed
  bool stop_at_eos = true;  // stop at the model's end-of-sequence tokens (not returned)
  int top_k = 0;            // sample among the k most likely tokens; 0: all
  float min_p = 0.0f;       // drop tokens less likely than min_p x the most likely one; 0: none
  // Penalties (also with temperature 0: the argmax is taken after them). repetition_penalty (> 0,
  // 1: off) divides the positive logits and multiplies the negative ones of every token in the
  // context (prompt included) and the reply; presence_penalty and frequency_penalty subtract
  // presence + frequency x count from the logit of every token generated by this call.
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  // Stop strings: generation stops once the reply's text contains one; matched across token
  // boundaries. The callback never sees a stop string nor the text after it (text that may still
  // start one is held back until it cannot); the returned tokens include the one that completed it.
  std::vector<std::string> stop;
  // Structured output: each token is drawn from those the constraint allows (the logits of the
  // others are set to -infinity before the penalties and the draw), the end-of-sequence token only
  // once the text is complete, and the reply is kept completable within max_new_tokens (a reply
  // cut by max_new_tokens is still complete when max_new_tokens leaves room for the shortest
  // completion). Generation ends when nothing but the end can follow. Null: no constraint.
  std::shared_ptr<const Constraint> constraint;
};

// Figures of the last generate call.
struct GenerationStats {
  // Tokens fed before the first new one (the prompt, plus the previous call's last generated
  // token when a session continues), and tokens generated.
  int prompt_tokens = 0, generated_tokens = 0;
  double prefill_ms = 0;  // until the first new token
  double decode_ms = 0;   // the rest
  double prefill_tok_s() const { return prefill_ms > 0 ? prompt_tokens * 1000.0 / prefill_ms : 0; }
  double decode_tok_s() const {
    return decode_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1000.0 / decode_ms : 0;
  }
  bool stopped_by_eos = false, stopped_by_callback = false;
  bool stopped_by_stop = false;  // a stop string of GenerationOptions::stop was produced
  // Tokens of the context kept in the KV cache from before the call (not prefilled again).
  int reused_tokens = 0;
  // Constrained steps (GenerationOptions::constraint) that masked the whole vocabulary: the
  // argmax and the best logits after it were refused, or the sampler is not greedy.
  int masked_steps = 0;
  // Constrained greedy steps whose argmax the constraint refused (masked ones included).
  int refused_steps = 0;
  // Decode submits (forwards and greedy batches after the prefill), and decode steps run whose
  // token was not used (a greedy batch's steps after a refused token or the end, a refused
  // token's step run again for its logits).
  int decode_submits = 0, wasted_steps = 0;
  // Host time of the constraint (checks, searches, masks, accepts), and of the logits its refused
  // steps read back or computed again.
  double constraint_ms = 0, constraint_logits_ms = 0;
};

// Called with each new token id and the text it completes (never a partial UTF-8 sequence; may
// be empty while a sequence is incomplete). Return false to stop generating: the token is kept.
// Once after the last token, if bytes were held back, it is called with id -1 and that text
// (its return value is ignored). It runs while the session holds its model's device: it must not
// create, destroy or run sessions of the same model.
using TokenCallback = std::function<bool(int32_t id, const std::string& piece)>;

// A conversation state (KV cache and scratch) on a model; several sessions share one model's
// weights. Each generate call continues the session's context: what it returned stays in the
// context (an end-of-sequence token does not).
class VKLLM_API Session {
 public:
  explicit Session(std::shared_ptr<Model> model);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Generates after the prompt tokens (ids in [0, vocab_size)). An empty prompt continues from
  // the last generated token. Returns the new tokens.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const GenerationOptions& opts,
                                const TokenCallback& on_token = nullptr);
  // Same with text, encoded without special tokens (chat_prompt's text carries them).
  std::vector<int32_t> generate(const std::string& prompt, const GenerationOptions& opts,
                                const TokenCallback& on_token = nullptr);
  // Generates after `context`, the whole context wanted (for example a conversation rendered again
  // with a new turn): the longest prefix it shares with the session's context stays in the KV
  // cache and only the rest is prefilled (stats().reused_tokens and prompt_tokens say how many).
  std::vector<int32_t> generate_reusing(const std::vector<int32_t>& context,
                                        const GenerationOptions& opts,
                                        const TokenCallback& on_token = nullptr);
  // Same with text (encoded as generate(string) does). When the session's context, decoded, is a
  // prefix of `context`, its tokens are kept exactly as generated and only the rest is encoded
  // (a chat's previous reply is not re-tokenized).
  std::vector<int32_t> generate_reusing(const std::string& context, const GenerationOptions& opts,
                                        const TokenCallback& on_token = nullptr);
  // How many tokens of the session's context generate_reusing(context) would keep in the KV cache
  // (nothing runs; the server routes a request to the session that keeps the most).
  int reusable_tokens(const std::vector<int32_t>& context) const;
  int reusable_tokens(const std::string& context) const;
  // The token ids of the context, in order (what generate calls fed and returned).
  std::vector<int32_t> context() const;
  void reset();                // clears the context (the KV cache)
  int context_tokens() const;  // tokens in the context (a reset session: 0)
  const GenerationStats& stats() const;
  const std::shared_ptr<Model>& model() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Continuous batching (docs/serve.md, "Batching"): an Engine serves many requests at once on one
// model. Each step() runs one batched forward over every active request (a decode row each, plus
// chunks of the prompts being prefilled), then samples each request's next token with its own
// options. The KV cache is a pool of fixed-size blocks from a memory budget: a request holds the
// blocks of its tokens, and requests that start with the same tokens share the blocks of that
// prefix. A model with sliding-window layers beside full ones keeps those layers' KV in a pool of
// its own that holds only each request's window (docs/serve.md, "Sliding-window layers in the
// pool"). Requests are admitted first come first served while the pool and max_sequences allow;
// when the pool runs out, the newest running request is preempted (its KV recomputed later).
// A request's tokens are those Session::generate gives for the same prompt and options alone.
struct EngineOptions {
  int max_sequences = 16;  // requests in the running batch at once (more wait)
  // KV pool size in bytes. 0: room for max_sequences requests at the full context length (plus
  // one spare block). With sliding-window layers, split between the two pools as docs/serve.md
  // says.
  uint64_t kv_budget_bytes = 0;
  int block_tokens = 16;  // token rows per KV block
  int step_tokens = 512;  // tokens one step computes (decodes and prefill chunks); >= max_sequences
};

// What a step did for one request: a new token, its text, and whether the request ended.
struct EngineEvent {
  uint64_t request = 0;
  int32_t token = -1;  // the new token; -1 when none (eos, a constraint's end, a cancel)
  // The text the token completes, stop strings held back as Session::generate's callback sees
  // it; on the last event also the text held back until then.
  std::string text;
  bool finished = false;
  // Set when finished: "stop" (eos, a stop string, a constraint's end), "length"
  // (max_new_tokens or the context), "cancelled", or "error" (text: the message).
  std::string finish_reason;
  std::string stop;          // the stop string met (finish "stop" by a stop string), else empty
  int generated_tokens = 0;  // tokens of the reply so far (those returned; not eos)
  int cached_tokens = 0;     // prompt tokens whose KV came from the shared prefix cache
};

struct EngineStats {
  int active = 0;   // requests in the running batch
  int waiting = 0;  // requests queued for admission (added but not yet running)
  int kv_blocks_used = 0, kv_blocks_cached = 0, kv_blocks_total = 0;
  int block_tokens = 0;
  uint64_t kv_block_bytes = 0;
  // The sliding-window layers' pool, where they have one (kv_window > 0: their window in tokens;
  // the kv_blocks_* above are then the full-attention layers' pool): blocks of block_tokens.
  int kv_window = 0;
  int kv_window_blocks_used = 0, kv_window_blocks_cached = 0, kv_window_blocks_total = 0;
  uint64_t kv_window_block_bytes = 0;
  uint64_t prefix_hit_tokens = 0;  // prompt tokens served from the prefix cache, all requests
  uint64_t preemptions = 0, steps = 0;
};

// Threads: add, cancel and stats may be called from any thread at any time; step (one thread at
// a time) runs the device, taking turns with the model's sessions.
class VKLLM_API Engine {
 public:
  // Allocates the KV pool on the model's backend; Error when it does not fit, or when the backend
  // has no batched forward.
  Engine(std::shared_ptr<Model> model, const EngineOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request (prompt ids in [0, vocab_size), non-empty, shorter than the context);
  // returns its id. max_new_tokens is capped at what the context leaves (as Session does); 0 ends
  // the request at the next step. Error on an invalid option or a prompt the pool cannot hold.
  uint64_t add(const std::vector<int32_t>& prompt, const GenerationOptions& opts);
  // Ends a request at the next step (its blocks are freed; it gets a "cancelled" event). An
  // unknown or finished id is ignored.
  void cancel(uint64_t request);
  // Runs one step: admits, prefills, decodes and samples; returns the events of the requests that
  // got a token or ended. Returns nothing when idle.
  std::vector<EngineEvent> step();
  // Whether no request is waiting or running (step() would do nothing).
  bool idle() const;
  EngineStats stats() const;
  const std::shared_ptr<Model>& model() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vkllm
