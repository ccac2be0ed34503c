// Per-engine transport state.
#include "transport/bootstrap/engine_transports.h"

#include <memory>

#include "gpu/gather_kernel.h"
#include "gpu/resident_gather.h"
#include "gpu/staging_kernel.h"
#include "transport/local/gpu_sharing.h"
#include "transport/local/local_workers.h"
#include "transport/tcp/io_pool.h"

namespace ferry::bootstrap {

Status prepare_transports(core::EngineContext& ctx) {
  ctx.gpu_exports = std::make_shared<local::GpuExports>();
  ctx.gpu_imports = std::make_shared<local::GpuImports>(ctx.stream_signals);
  ctx.local_workers = std::make_shared<local::LocalWorkers>(ctx.engine_id);
  if (ctx.options.staging_copy == StagingCopy::kKernel) {
    ctx.gather_kernels = std::make_shared<platform::GatherKernels>();
    ctx.staging_kernels = std::make_shared<platform::StagingKernels>();
    if (ctx.options.gather_linger.count() > 0) {
      ctx.resident_gather = std::make_shared<platform::ResidentGather>(ctx.gather_kernels, ctx.options.gather_linger);
    }
  }
  FERRY_ASSIGN_OR_RETURN(ctx.tcp_pool, tcp::IoPool::start(ctx));
  return Status();
}

void region_retired(core::EngineContext& ctx, uint64_t region_id) { ctx.gpu_exports->retire(region_id); }

}  // namespace ferry::bootstrap
