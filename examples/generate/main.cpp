// The smallest complete vkllm client: open an artifact, stream greedy tokens to stdout, print the
// figures on stderr. Only <vkllm/vkllm.h> is needed.
//
//   vkllm_generate MODEL.vkllm PROMPT [MAX_NEW_TOKENS]
//
// The Vulkan device is $VKLLM_DEVICE or the first GPU (Mesa's lavapipe on machines without one).
#include <vkllm/vkllm.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s MODEL.vkllm PROMPT [MAX_NEW_TOKENS]\n", argv[0]);
    return 2;
  }
  try {
    vkllm::GenerationOptions gen;  // greedy
    gen.max_new_tokens = argc > 3 ? std::stoi(argv[3]) : 32;

    auto model = vkllm::Model::open(argv[1]);
    vkllm::Session session(model);
    session.generate(std::string(argv[2]), gen, [](int32_t, const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;  // false would stop here
    });
    std::fputc('\n', stdout);

    const vkllm::ModelInfo& info = model->info();
    const vkllm::GenerationStats& st = session.stats();
    std::fprintf(stderr, "vkllm %s: %s (%s) on %s: %d prompt tokens, %d generated, %.1f tok/s\n",
                 vkllm::version(), info.architecture.c_str(), info.recipe.c_str(),
                 info.device_name.c_str(), st.prompt_tokens, st.generated_tokens,
                 st.decode_tok_s());
    return 0;
  } catch (const vkllm::Error& e) {  // a message naming what is wrong
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // std::stoi on a bad count
    std::fprintf(stderr, "error: bad MAX_NEW_TOKENS: %s\n", e.what());
    return 2;
  }
}
