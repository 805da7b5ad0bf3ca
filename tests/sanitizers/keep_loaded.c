// Preloaded into every test process of the asan preset (LD_PRELOAD in CMakePresets.json):
// dlclose() leaves the library mapped. The Vulkan loader unloads the Khronos validation layer at
// vkDestroyInstance; LeakSanitizer, which scans at exit, then no longer sees the layer's globals
// and reports all the memory they still point to as "indirect leaks" from an "<unknown module>"
// that no suppression can name. With the library kept, that memory is reachable (no report) and a
// real leak inside it is reported with a symbolized stack, which lsan.supp could then name.
// Built without sanitizers: non-instrumented processes (python3, sh) load it too.
#include <stddef.h>

int dlclose(void* handle) {
  (void)handle;
  return 0;
}
