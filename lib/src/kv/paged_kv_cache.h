// The paged cache's factory (make_kv_cache calls it for Layout::paged).
#pragma once

#include <memory>

#include "lmpipe/kv/kv_cache.h"

namespace lmp::kv {

Result<std::unique_ptr<KvCache>> make_paged_kv_cache(const KvConfig& cfg);

}  // namespace lmp::kv
