// vkllm devices [--json]: the Vulkan devices this machine offers and what vkllm can use on each.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#ifdef VKLLM_WITH_VULKAN
#include "backend/vulkan/vk_context.h"
#endif

namespace vkllm::cli {

void add_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices",
                                 "List the Vulkan devices (index, name, type, driver, memory, "
                                 "subgroup size, fp16, int8 dot product, cooperative matrix)");
  static bool json_out = false;
  cmd->add_flag("--json", json_out, "Print a JSON array instead of a table");
  cmd->callback([] {
#ifndef VKLLM_WITH_VULKAN
    fail("this vkllm was built without Vulkan (VKLLM_WITH_VULKAN=OFF)");
#else
    const auto devs = vk::list_devices();
    // A KHR cooperative matrix shape as "16x8x32", empty where the device lists none.
    auto khr_shape = [](const vk::CoopmatShape& s) {
      return s ? std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k)
               : std::string();
    };
    if (json_out) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& d : devs)
        j.push_back({{"index", d.index},
                     {"name", d.name},
                     {"type", d.type},
                     {"driver", d.driver},
                     {"api_version", d.api_version},
                     {"device_local_bytes", d.device_local_bytes},
                     {"subgroup_size", d.subgroup_size},
                     {"subgroup_size_min", d.subgroup_min},
                     {"subgroup_size_max", d.subgroup_max},
                     {"subgroup_size_control", d.subgroup_size_control},
                     {"fp16_arithmetic", d.fp16_arith},
                     {"storage_16bit", d.storage16},
                     {"storage_8bit", d.storage8},
                     {"int8_arithmetic", d.int8_arith},
                     {"int8_dot_product", d.int_dot},
                     {"int8_dot_product_accelerated", d.int_dot_accel},
                     {"cooperative_matrix_khr", d.coopmat_khr},
                     {"cooperative_matrix_nv", d.coopmat_nv},
                     {"cooperative_matrix_int8_gemm", d.coopmat_int8},
                     {"cooperative_matrix_khr_int8", khr_shape(d.khr_int8)},
                     {"cooperative_matrix_khr_fp16", khr_shape(d.khr_f16)},
                     {"max_storage_buffer_range", d.max_storage_range},
                     {"max_memory_allocation_size", d.max_alloc},
                     {"timestamps", d.timestamps}});
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    if (devs.empty())
      fail(
          "no Vulkan device found (install a driver; for a CPU device: apt-get install "
          "mesa-vulkan-drivers)");
    std::printf("%-3s %-34s %-10s %-28s %9s %8s %5s %8s %7s\n", "idx", "name", "type", "driver",
                "memory", "subgroup", "fp16", "int8dot", "coopmat");
    for (const auto& d : devs) {
      const char* dot = d.int_dot ? (d.int_dot_accel ? "accel" : "yes") : "no";
      const char* cm =
          d.coopmat_khr ? (d.coopmat_nv ? "khr+nv" : "khr") : (d.coopmat_nv ? "nv" : "no");
      std::printf("%-3u %-34.34s %-10s %-28.28s %6.1fGiB %8u %5s %8s %7s\n", d.index,
                  d.name.c_str(), d.type.c_str(), d.driver.c_str(),
                  static_cast<double>(d.device_local_bytes) / (1 << 30), d.subgroup_size,
                  d.fp16_arith && d.storage16 ? "yes" : "no", dot, cm);
    }
#endif
  });
}

}  // namespace vkllm::cli
