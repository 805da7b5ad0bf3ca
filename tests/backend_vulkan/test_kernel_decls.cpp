// The kernel registry (kernels.def, vk_kernels.h) against the embedded SPIR-V: every declared
// module and its fp16 twin exist; each binding the module declares is within the declared count
// and has the declared access (r: every view of it NonWritable, w: every view NonReadable, b:
// otherwise); the push-constant block is as large as the declared struct; every embedded module
// is declared; every specialization constant of a module is a field of the declared spec struct,
// with the struct's default, and every field is a constant of some module of the struct's lines;
// the VK_KERNEL_KHR modules are embedded exactly when configure found their compiler
// (VKLLM_KHR_SHADERS), as SPIR-V 1.6 with the cooperative-matrix extensions. No device needed:
// the modules are read as words.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/vk_kernels.h"
#include "backend/vulkan/vk_shaders.h"

#ifndef VKLLM_KHR_SHADERS
#error "tests/backend_vulkan/CMakeLists.txt defines VKLLM_KHR_SHADERS (0 or 1)"
#endif

namespace vkllm::vk {
namespace {

struct ModuleFacts {
  std::map<uint32_t, std::string> access;  // binding -> r, w or b
  uint32_t push_bytes = 0;
};

// Calls f(opcode, word count, operands) for each instruction after the module's 5-word header,
// stopping at a malformed length.
template <typename F>
void for_each_instruction(const ShaderBlob& b, F f) {
  for (size_t i = 5; i < b.words;) {
    const uint32_t op = b.code[i] & 0xFFFFu, len = b.code[i] >> 16;
    if (len == 0 || i + len > b.words) break;
    f(op, len, b.code + i + 1);
    i += len;
  }
}

// Reads bindings and the push block out of a module's instructions (SPIR-V 1.3 opcodes).
ModuleFacts read_module(const ShaderBlob& b) {
  constexpr uint32_t kTypeInt = 21, kTypeFloat = 22, kTypeVector = 23, kTypeStruct = 30,
                     kTypePointer = 32, kVariable = 59, kDecorate = 71, kMemberDecorate = 72;
  constexpr uint32_t kBinding = 33, kOffset = 35, kNonWritable = 24, kNonReadable = 25;
  constexpr uint32_t kPushConstant = 9;
  std::map<uint32_t, uint32_t> binding, pointee, var_type, scalar_bytes;
  std::map<uint32_t, std::vector<uint32_t>> members;  // struct -> member types
  std::map<uint32_t, std::map<uint32_t, uint32_t>> offsets;
  std::set<uint32_t> non_writable, non_readable, push_vars;
  for_each_instruction(b, [&](uint32_t op, uint32_t len, const uint32_t* a) {
    if (op == kDecorate && len >= 4 && a[1] == kBinding) binding[a[0]] = a[2];
    if (op == kMemberDecorate && len >= 4 && a[2] == kNonWritable) non_writable.insert(a[0]);
    if (op == kMemberDecorate && len >= 4 && a[2] == kNonReadable) non_readable.insert(a[0]);
    if (op == kMemberDecorate && len >= 5 && a[2] == kOffset) offsets[a[0]][a[1]] = a[3];
    if ((op == kTypeInt || op == kTypeFloat) && len >= 3) scalar_bytes[a[0]] = a[1] / 8;
    if (op == kTypeVector && len >= 4) scalar_bytes[a[0]] = scalar_bytes[a[1]] * a[2];
    if (op == kTypeStruct) members[a[0]].assign(a + 1, a + len - 1);
    if (op == kTypePointer && len >= 4) pointee[a[0]] = a[2];
    if (op == kVariable && len >= 4) {
      var_type[a[1]] = pointee[a[0]];
      if (a[2] == kPushConstant) push_vars.insert(a[1]);
    }
  });
  ModuleFacts f;
  std::map<uint32_t, std::set<char>> views;
  for (const auto& [var, bind] : binding) {
    const uint32_t st = var_type[var];
    views[bind].insert(non_writable.count(st) ? 'r' : non_readable.count(st) ? 'w' : 'b');
  }
  for (const auto& [bind, v] : views)
    f.access[bind] = v.size() == 1 ? std::string(1, *v.begin()) : "b";
  for (uint32_t var : push_vars) {
    const uint32_t st = var_type[var];
    for (const auto& [m, off] : offsets[st])
      f.push_bytes = std::max(f.push_bytes, off + scalar_bytes[members[st].at(m)]);
  }
  return f;
}

// A module's specialization constants: SpecId -> the defaults of the constants decorated with it
// (OpSpecConstant, OpSpecConstantTrue / False; a bool as 0 or 1). A constant local_size_x_id names
// is also the first constituent of the WorkgroupSize composite, whose default is the local size's
// (1 where the shader gives none): where the id has a named constant too, only that one's counts.
std::map<uint32_t, std::set<uint32_t>> spec_constants(const ShaderBlob& b) {
  constexpr uint32_t kSpecTrue = 48, kSpecFalse = 49, kSpecConstant = 50, kSpecComposite = 51,
                     kDecorate = 71, kSpecId = 1, kBuiltIn = 11, kWorkgroupSize = 25;
  std::map<uint32_t, uint32_t> spec_id, value;   // result id -> SpecId, default
  std::map<uint32_t, uint32_t> composite_first;  // composite -> its first constituent
  uint32_t wg = 0;
  for_each_instruction(b, [&](uint32_t op, uint32_t len, const uint32_t* a) {
    if (op == kDecorate && len >= 4 && a[1] == kSpecId) spec_id[a[0]] = a[2];
    if (op == kDecorate && len >= 4 && a[1] == kBuiltIn && a[2] == kWorkgroupSize) wg = a[0];
    if ((op == kSpecTrue || op == kSpecFalse) && len >= 3) value[a[1]] = op == kSpecTrue;
    if (op == kSpecConstant && len >= 4) value[a[1]] = a[2];
    if (op == kSpecComposite && len >= 4) composite_first[a[1]] = a[2];
  });
  const uint32_t wg_x = composite_first.count(wg) ? composite_first[wg] : 0;
  std::map<uint32_t, std::set<uint32_t>> named, size;
  for (const auto& [rid, sid] : spec_id) (rid == wg_x ? size : named)[sid].insert(value[rid]);
  for (const auto& [sid, v] : size)
    if (!named.count(sid)) named[sid] = v;
  return named;
}

const ShaderBlob* blob(const std::string& name) {
  for (const ShaderBlob& b : all_shaders())
    if (name == b.name) return &b;
  return nullptr;
}

TEST(KernelDecls, EveryDeclarationMatchesItsModule) {
  size_t checked = 0;
  for (const KernelDecl& d : kernel_decls()) {
    for (bool f16 : {false, true}) {
      const std::string name = module_name(d.id, f16);
      const ShaderBlob* b = blob(name);
#ifndef VKLLM_MEASURE
      if (d.measure) {
        EXPECT_EQ(b, nullptr) << name << ": a measurement module in a release build";
        continue;
      }
#endif
      if (d.khr && !VKLLM_KHR_SHADERS) {
        EXPECT_EQ(b, nullptr) << name << ": embedded, but configure found no glslangValidator";
        continue;
      }
      ASSERT_NE(b, nullptr) << name << " is declared in kernels.def but not embedded";
      const ModuleFacts f = read_module(*b);
      EXPECT_EQ(f.push_bytes, d.push_bytes) << name << ": push-constant block size";
      for (const auto& [bind, acc] : f.access) {
        ASSERT_LT(bind, d.bindings()) << name << ": binding beyond the declared " << d.access;
        EXPECT_EQ(std::string(1, d.access[bind]), acc)
            << name << ": access of binding " << bind << " (declared " << d.access << ")";
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 2 * 60u);
}

// What is wrong with `fields` (defaults `defaults`) as the spec struct of module b: a constant of
// the module that is no field, or a field whose default is not the constant's; fp16 flags that
// are set by default. Empty: nothing.
std::vector<std::string> spec_mismatches(const ShaderBlob& b, std::span<const SpecField> fields,
                                         std::span<const uint32_t> defaults) {
  std::vector<std::string> out;
  for (const auto& [id, values] : spec_constants(b)) {
    size_t i = 0;
    while (i < fields.size() && fields[i].id != id) ++i;
    if (i == fields.size()) {
      out.push_back(fmt::format("{}: constant {} is no field of its spec struct", b.name, id));
      continue;
    }
    if (!values.count(defaults[i]))
      out.push_back(fmt::format("{}: constant {} defaults to {} in the shader, {} in the struct",
                                b.name, id, *values.begin(), defaults[i]));
    if (fields[i].kind == kF16 && defaults[i] != 0)
      out.push_back(fmt::format("{}: fp16 flag {} set by default", b.name, id));
  }
  return out;
}

TEST(KernelDecls, SpecStructsMatchTheModulesConstants) {
  std::map<const SpecField*, std::set<uint32_t>> seen;  // spec struct -> ids its modules declare
  std::map<const SpecField*, std::string> struct_of;    // (a line of it, for messages)
  size_t checked = 0;
  for (const KernelDecl& d : kernel_decls()) {
    std::set<uint32_t> ids;
    for (const SpecField& f : d.spec_fields) {
      EXPECT_TRUE(ids.insert(f.id).second) << d.name << ": constant " << f.id << " twice";
      EXPECT_GT(f.id, 0u) << d.name;
    }
    ASSERT_EQ(d.spec_defaults.size(), d.spec_fields.size()) << d.name;
    struct_of[d.spec_fields.data()] = std::string(d.name);
    for (bool f16 : {false, true}) {
      const ShaderBlob* b = blob(module_name(d.id, f16));
      if (!b) continue;  // (not embedded in this build: EveryDeclarationMatchesItsModule)
      for (const auto& [id, v] : spec_constants(*b)) seen[d.spec_fields.data()].insert(id);
      for (const std::string& e : spec_mismatches(*b, d.spec_fields, d.spec_defaults))
        ADD_FAILURE() << e;
      ++checked;
    }
  }
  EXPECT_GE(checked, 2 * 60u);
  for (const KernelDecl& d : kernel_decls()) {
    if (!seen.count(d.spec_fields.data())) continue;
    for (const SpecField& f : d.spec_fields)
      EXPECT_TRUE(seen[d.spec_fields.data()].count(f.id))
          << "the spec struct of " << struct_of[d.spec_fields.data()] << " declares constant "
          << f.id << ", which none of its modules has";
  }
}

// The checker sees a wrong struct: rms_norm's fp16 twin against the GLU kernels' struct (no
// ROWS_SG), against its own with another default, and linear_8da4w_b32 against a struct whose
// workgroup size defaults to 256.
TEST(KernelDecls, TheSpecCheckerTellsStructsApart) {
  const ShaderBlob& norm = *blob(module_name(Shader::rms_norm, true));
  EXPECT_TRUE(
      spec_mismatches(norm, spec_fields<RmsNormSpec>(), kSpecDefaults<RmsNormSpec>).empty());
  EXPECT_EQ(spec_mismatches(norm, spec_fields<GluSpec>(), kSpecDefaults<GluSpec>).size(), 1u);
  std::array<uint32_t, 5> rows_sg_on = kSpecDefaults<RmsNormSpec>;
  rows_sg_on[4] = 1;
  EXPECT_EQ(spec_mismatches(norm, spec_fields<RmsNormSpec>(), rows_sg_on).size(), 1u);
  const ShaderBlob& mv = *blob(module_name(Shader::linear_8da4w_b32, false));
  std::array<uint32_t, 5> wg256 = kSpecDefaults<Matvec8da4wSpec>;
  EXPECT_TRUE(spec_mismatches(mv, spec_fields<Matvec8da4wSpec>(), wg256).empty());
  wg256[4] = 256;
  EXPECT_EQ(spec_mismatches(mv, spec_fields<Matvec8da4wSpec>(), wg256).size(), 1u);
}

// The reader finds the constants: rms_norm's fp16 twin has X16, Y16 (its quantizing variant's
// B16, S16 are unused) and ROWS_SG, all false; linear_8da4w_b32's workgroup size (17) defaults
// to its local_size_x, 64, and the portable GEMM's BT (9) to 64, not its composite's 1.
TEST(KernelDecls, TheSpecReaderSeesConstantsAndDefaults) {
  const auto norm = spec_constants(*blob(module_name(Shader::rms_norm, true)));
  ASSERT_EQ(norm.size(), 3u);
  EXPECT_EQ(norm.at(1), std::set<uint32_t>{0});
  EXPECT_EQ(norm.at(5), std::set<uint32_t>{0});
  const auto mv = spec_constants(*blob(module_name(Shader::linear_8da4w_b32, false)));
  EXPECT_EQ(mv.at(17), std::set<uint32_t>{64});
  EXPECT_EQ(mv.at(8), std::set<uint32_t>{4});
  const auto mm = spec_constants(*blob(module_name(Shader::linear_8da4w_mm, false)));
  EXPECT_EQ(mm.at(9), std::set<uint32_t>{64});
  static_assert(kSpecDefaults<Matvec8da4wSpec>[4] == 64 && Matvec8da4wSpec::fields[4].id == 17);
}

TEST(KernelDecls, EveryEmbeddedModuleIsDeclared) {
  std::set<std::string> declared;
  for (const KernelDecl& d : kernel_decls())
    for (bool f16 : {false, true}) declared.insert(module_name(d.id, f16));
  for (const ShaderBlob& b : all_shaders()) EXPECT_TRUE(declared.count(b.name)) << b.name;
}

// The words of a module's OpCapability operands and OpExtension names.
struct Features {
  uint32_t version = 0;  // the header's SPIR-V version word (0x00010600: 1.6)
  std::set<uint32_t> capabilities;
  std::set<std::string> extensions;
};
Features features(const ShaderBlob& b) {
  constexpr uint32_t kCapability = 17, kExtension = 10;
  Features f;
  if (b.words > 1) f.version = b.code[1];
  for (size_t i = 5; i < b.words;) {
    const uint32_t op = b.code[i] & 0xFFFFu, len = b.code[i] >> 16;
    if (len == 0 || i + len > b.words) break;
    if (op == kCapability && len >= 2) f.capabilities.insert(b.code[i + 1]);
    if (op == kExtension && len >= 2)  // a nul-terminated string in the words
      f.extensions.insert(
          std::string(reinterpret_cast<const char*>(b.code + i + 1),
                      strnlen(reinterpret_cast<const char*>(b.code + i + 1), (len - 1) * 4)));
    i += len;
  }
  return f;
}

// The configured compiler accepts GL_KHR_cooperative_matrix and GL_NV_cooperative_matrix2: every
// VK_KERNEL_KHR module and its fp16 twin is embedded as SPIR-V 1.6 (--target-env vulkan1.3) with
// the capability CooperativeMatrixKHR, and coopmat2_copy with NV's tensor addressing. Skipped where
// configure found no such compiler (scripts/setup.sh builds one; CI always has it).
TEST(KernelDecls, TheNewCompilerBuiltTheCooperativeMatrixModules) {
  if (!VKLLM_KHR_SHADERS)
    GTEST_SKIP() << "configured without a glslangValidator for GL_KHR_cooperative_matrix "
                    "(scripts/glslang.sh builds one)";
  constexpr uint32_t kCooperativeMatrixKHR = 6022, kTensorAddressingNV = 5439;
  size_t khr = 0;
  for (const KernelDecl& d : kernel_decls()) {
    if (!d.khr) continue;
    for (bool f16 : {false, true}) {
      const std::string name = module_name(d.id, f16);
      const ShaderBlob* b = blob(name);
      ASSERT_NE(b, nullptr) << name << " is a VK_KERNEL_KHR line but not embedded";
      const Features f = features(*b);
      EXPECT_EQ(f.version, 0x00010600u) << name << ": SPIR-V version";
      EXPECT_TRUE(f.capabilities.count(kCooperativeMatrixKHR)) << name;
      EXPECT_TRUE(f.extensions.count("SPV_KHR_cooperative_matrix")) << name;
      ++khr;
    }
  }
  EXPECT_GE(khr, 6u);
  const Features c2 = features(*blob(module_name(Shader::coopmat2_copy, false)));
  EXPECT_TRUE(c2.extensions.count("SPV_NV_cooperative_matrix2"));
  EXPECT_TRUE(c2.capabilities.count(kTensorAddressingNV));
  // The modules Debian's glslc compiles stay SPIR-V 1.3 (--target-env=vulkan1.1).
  EXPECT_EQ(features(*blob(module_name(Shader::gemm_peak, false))).version, 0x00010300u);
}

// The checker itself sees a wrong declaration: a module read against another's facts differs.
TEST(KernelDecls, TheCheckerTellsModulesApart) {
  const ModuleFacts norm = read_module(*blob(module_name(Shader::rms_norm_add_quant, false)));
  const ModuleFacts rope = read_module(*blob(module_name(Shader::rope, false)));
  EXPECT_EQ(norm.push_bytes, sizeof(RmsNormPush));
  EXPECT_EQ(rope.push_bytes, sizeof(RopePush));
  EXPECT_NE(norm.push_bytes, rope.push_bytes);
  ASSERT_EQ(norm.access.size(), 7u);
  EXPECT_EQ(norm.access.at(0), "r");
  EXPECT_EQ(norm.access.at(2), "w");
}

}  // namespace
}  // namespace vkllm::vk
