// vkllm selftest [--device D] [--json] [--artifact A]: every kernel variant this device would use
// against the CPU reference (src/selftest/selftest.h); one PASS/FAIL line per variant; exit 0 only
// if all pass. The paths found wrong are cached for this device and driver, and later runs use the
// portable kernels instead (src/backend/vulkan/vk_verdict.h).
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#ifdef VKLLM_WITH_VULKAN
#include "selftest/selftest.h"
#endif

namespace vkllm::cli {

void add_selftest(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "selftest",
      "Check every kernel variant this Vulkan device would use against the CPU reference "
      "(exit 0 only if all pass; paths found wrong are not used afterwards)");
  static std::string device, artifact;
  static bool json_out = false, no_cache = false;
  static int steps = 12;
  cmd->add_option("--device", device,
                  "Vulkan device: index or name substring (see `vkllm devices`)");
  cmd->add_option("--artifact", artifact,
                  "Also decode this artifact on the device against the CPU reference "
                  "(as `vkllm verify --agree`)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--steps", steps, "Greedy decode steps checked per variant")
      ->check(CLI::Range(1, 24));
  cmd->add_flag("--json", json_out, "Print one JSON object instead of the table");
  cmd->add_flag("--no-cache", no_cache,
                "Do not record the verdict for this device (later runs are not affected)");
  cmd->callback([] {
#ifndef VKLLM_WITH_VULKAN
    fail("this vkllm was built without Vulkan (VKLLM_WITH_VULKAN=OFF)");
#else
    SelftestOptions o;
    o.device = device;
    o.artifact = artifact;
    o.decode_steps = steps;
    o.write_verdict = !no_cache;
    if (!json_out)
      o.on_line = [](const SelftestLine& l) {
        const std::string figures = l.steps > 0
                                        ? fmt::format("nmse {:.2e} (max {:.1e})  {}/{} exact",
                                                      l.worst_nmse, l.max_nmse, l.exact, l.steps)
                                        : std::string();
        std::printf("%s  %-56s %-22s %-38s %5.2f s%s%s\n", l.ok ? "PASS" : "FAIL", l.name.c_str(),
                    l.path.c_str(), figures.c_str(), l.seconds, l.ok ? "" : "\n      ",
                    l.reason.c_str());
        std::fflush(stdout);
      };
    const SelftestReport rep = run_selftest(o);
    if (json_out) {
      std::printf("%s\n", rep.to_json().dump(2).c_str());
    } else {
      size_t pass = 0;
      for (const auto& l : rep.lines) pass += l.ok;
      std::printf(
          "selftest: %zu of %zu variants pass on %s (driver %s, subgroup size %u, vkllm %s)\n",
          pass, rep.lines.size(), rep.device.c_str(), rep.driver.c_str(), rep.subgroup_size,
          rep.vkllm_version.c_str());
      for (const auto& w : rep.wrong)
        if (w == "subgroups")
          std::printf(
              "selftest: this device's subgroups are not what it reports: vkllm refuses it from "
              "now on (VKLLM_IGNORE_SELFTEST=1 overrides)\n");
        else
          std::printf("selftest: the %s path is wrong here: later runs use the portable kernels\n",
                      w.c_str());
      if (!rep.verdict_path.empty())
        std::printf("selftest: verdict cached in %s\n", rep.verdict_path.c_str());
    }
    if (!rep.ok()) throw CLI::RuntimeError(1);
#endif
  });
}

}  // namespace vkllm::cli
