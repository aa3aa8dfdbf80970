// The factories make_kv_cache calls: the paged cache, and the int4-kivi cache (either layout).
#pragma once

#include <memory>

#include "lmpipe/kv/kv_cache.h"

namespace lmp::kv {

Result<std::unique_ptr<KvCache>> make_paged_kv_cache(const KvConfig& cfg);
Result<std::unique_ptr<KvCache>> make_kivi_kv_cache(const KvConfig& cfg);

}  // namespace lmp::kv
