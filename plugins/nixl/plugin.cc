// The entry points NIXL's plugin manager looks for in libplugin_FERRY.so.
#include <backend/backend_plugin.h>

#include "backend_params.h"
#include "ferry_backend.h"

namespace {

using FerryPlugin = nixlBackendPluginCreator<ferry::nixl::nixlFerryEngine>;

}  // namespace

extern "C" NIXL_PLUGIN_EXPORT nixlBackendPlugin* nixl_plugin_init() {
  return FerryPlugin::create(NIXL_PLUGIN_API_VERSION, "FERRY", "0.1.0", ferry::nixl::default_backend_params(),
                             {DRAM_SEG, VRAM_SEG});
}

extern "C" NIXL_PLUGIN_EXPORT void nixl_plugin_fini() {}
