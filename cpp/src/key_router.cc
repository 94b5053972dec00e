#include "xdl_ec/key_router.h"

#include <cstddef>

#include "xdl_ec/route_table.h"

namespace xdl_ec {

int KeyRouter::ServerOf(int64_t key, int n) { return RouteTable::Dense(n).ServerOf(key); }

void KeyRouter::ServersOf(const int64_t* keys, size_t count, int n, int32_t* out) {
  RouteTable::Dense(n).ServersOf(keys, count, out);
}

}  // namespace xdl_ec
