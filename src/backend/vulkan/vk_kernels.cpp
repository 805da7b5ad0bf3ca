#include "backend/vulkan/vk_kernels.h"

#include "core/error.h"

namespace vkllm::vk {

namespace {
constexpr KernelDecl kDecls[] = {
#define VK_KERNEL(name, file, defines, access, P, S)                                   \
  {Shader::name,     #name, #file, defines, access, push_bytes<P>(), spec_fields<S>(), \
   kSpecDefaults<S>, false, false},
#define VK_MEASURE_KERNEL(name, file, defines, access, P, S)                           \
  {Shader::name,     #name, #file, defines, access, push_bytes<P>(), spec_fields<S>(), \
   kSpecDefaults<S>, true,  false},
#define VK_KERNEL_KHR(name, file, defines, access, P, S)                               \
  {Shader::name,     #name, #file, defines, access, push_bytes<P>(), spec_fields<S>(), \
   kSpecDefaults<S>, false, true},
#include "backend/vulkan/kernels.def"
#undef VK_KERNEL
#undef VK_MEASURE_KERNEL
#undef VK_KERNEL_KHR
};
constexpr bool in_order() {
  for (size_t i = 0; i < std::size(kDecls); ++i)
    if (static_cast<size_t>(kDecls[i].id) != i) return false;
  return true;
}
static_assert(in_order(), "kDecls is indexed by Shader");
}  // namespace

std::span<const KernelDecl> kernel_decls() {
  return kDecls;
}

const KernelDecl& kernel_decl(Shader k) {
  const auto i = static_cast<size_t>(k);
  if (i >= std::size(kDecls)) fail("vulkan: no kernel declared with id {}", i);
  return kDecls[i];
}

std::string module_name(Shader k, bool f16) {
  std::string n(kernel_decl(k).name);
  if (f16) n += "_f16";
  return n;
}

}  // namespace vkllm::vk
