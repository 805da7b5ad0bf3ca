// `vkllm export`: Hugging Face checkpoint -> one artifact, streaming. Each planned weight job reads
// its source rows in bounded chunks (fp32), quantizes / converts them and appends the bytes to the
// artifact writer; the checkpoint's mapped pages are released as they are consumed, so the peak
// resident memory is bounded by the largest quantized tensor, not by the checkpoint.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "export/recipe.h"

namespace vkllm {

class LoraMerge;

struct ExportProgress {
  size_t job = 0, jobs = 0;             // weight jobs done / total
  uint64_t bytes = 0, total_bytes = 0;  // artifact weight bytes written / total
  std::string tensor;                   // the tensor being written
};

struct ExportResult {
  std::string path;
  std::string recipe;
  uint64_t file_size = 0;
  double seconds = 0;
  uint64_t peak_rss = 0;   // bytes (getrusage maxrss of this process so far)
  nlohmann::json summary;  // recipe, sizes by dtype, op family counts
};

// Plans the export from config.json alone (no weights needed): the exact artifact size (given the
// tokenizer files present in the folder) and the summary; path and timings are left empty.
// With lora, the size includes the adapter's metadata.
ExportResult plan_checkpoint(const std::string& hf_dir, const RecipeOptions& o,
                             const LoraMerge* lora = nullptr);

// With lora (src/export/lora.h), every weight the adapter changes is merged in fp32 as its rows
// stream by, before the recipe converts them; the artifact records the adapter (producer.lora).
ExportResult export_checkpoint(const std::string& hf_dir, const std::string& out_path,
                               const RecipeOptions& o,
                               const std::function<void(const ExportProgress&)>& progress = {},
                               int64_t chunk_elems = int64_t(8) << 20,
                               const LoraMerge* lora = nullptr);

// Op family counts and weight bytes by dtype of a program (export and verify summaries).
nlohmann::json program_summary(const Program& p);

uint64_t peak_rss_bytes();

}  // namespace vkllm
